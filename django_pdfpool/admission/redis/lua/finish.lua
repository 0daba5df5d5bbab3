-- Rule 5: a job of ME ended; no cache. ARGV: ME LEASE SLOTS KEY ID PIECES OUTCOME TOOK_MS
-- -> {status, events}; status need: sharers in other processes wait: put the outcome (as
-- JSON) in res:ID (put.lua) and call again with PIECES, their number; it is kept until each
-- of them has read it (collect.lua); ok; gone. OUTCOME (completed, failed or cancelled)
-- and TOOK_MS (its run time here) are counted once, when not `need`.
reap()
renew()
local rk = P .. 'res:' .. ARGV[5]
local job = this(ARGV[4], ARGV[5])
if not job then  -- Redis lost it (restarted, failed over): it ran all the same
  if ARGV[6] ~= '' then redis.call('DEL', rk) end
  tally(ARGV[7], 1, RUNS, tonumber(ARGV[8]))
  touch()
  return {'gone', events}
end
local readers = {}
for proc, n in pairs(job.w) do
  if n > 0 and proc ~= ME then readers[#readers + 1] = proc end
end
if #readers > 0 and ARGV[6] == '' then
  touch(job.jk)
  return {'need', events}
end
forget(job)  -- rule 5: no cache; the result lives only until its readers took it
tally(ARGV[7], 1, RUNS, tonumber(ARGV[8]))
if #readers > 0 then
  shaped(rk, 'hash')  -- anything else there is deleted: its readers find no outcome
  redis.call('HSET', rk, 'n', ARGV[6])
  for _, proc in ipairs(readers) do
    redis.call('HSET', rk, 'r:' .. proc, 1)
    tell(proc, 'done', job.key, job.id)
  end
  redis.call('PEXPIRE', rk, LEASE)
elseif ARGV[6] ~= '' then  -- its readers left meanwhile
  redis.call('DEL', rk)
end
promote()
touch()
return {'ok', events}
