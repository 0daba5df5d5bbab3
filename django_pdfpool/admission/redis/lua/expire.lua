-- Rule 3's wait, on the Redis clock. ARGV: ME LEASE SLOTS KEY ID
-- -> {ms left before the deadline (-1: not queued or no deadline, 0: expired now), events}
reap()
renew()
local job = this(ARGV[4], ARGV[5])
if not job or job.state ~= 'queued' or tonumber(job.dl or 0) == 0 then
  touch()
  return {'-1', events}
end
local left = tonumber(job.dl) - NOW
if left > 0 then
  touch(job.jk)
  return {tostring(left), events}
end
conclude(job, 'busy', nil)
touch()
return {'0', events}
