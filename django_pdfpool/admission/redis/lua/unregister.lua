-- ME leaves the process table; whatever Redis still holds for it (it is idle: only
-- leftovers of failed calls) ends. ARGV: ME LEASE SLOTS -> {events}
if not redis.call('ZSCORE', PROCS, ME) then  -- never registered (refused for other terms,
  vacate()                                   -- whose LEASE and SLOTS are not the namespace's)
  return {events}                            -- or reaped: nothing of ME is left to end
end
reap()
for _, key in ipairs(in_flight()) do
  local job = load(key)
  if job then
    if job.owner == ME then
      conclude(job, 'lost', ME)
    elseif (job.w[ME] or 0) > 0 then
      unwait(job, ME, job.w[ME])
    end
  end
end
redis.call('ZREM', PROCS, ME)
redis.call('HDEL', TERMS, ME)
promote()
touch()
return {events}
