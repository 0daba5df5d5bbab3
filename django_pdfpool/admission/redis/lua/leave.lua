-- Rule 4: N callers of ME gave up on a job (STARTER 1: its starter among them).
-- ARGV: ME LEASE SLOTS KEY ID N STARTER -> {status (ok|gone), events}
reap()
renew()
local job = this(ARGV[4], ARGV[5])
if not job then touch() return {'gone', events} end
if ARGV[7] == '1' then redis.call('HSET', job.jk, 'sw', 0) end
if not unwait(job, ME, tonumber(ARGV[6])) then touch(job.jk) end
touch()
return {'ok', events}
