-- Read only: everything in flight, the leases and the cluster's books (prelude.lua's
-- tally), for snapshots and status pages. KEYS: procs -> {now ms, {proc, lease end}*,
-- {key, {field, value}*}*, {counter, n}* (with since), queue waits ms*, run times ms*}
local PROCS = KEYS[1]
local P = string.sub(PROCS, 1, -6)
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local jobs = {}
local keys = redis.call('SMEMBERS', P .. 'running')
for _, key in ipairs(redis.call('LRANGE', P .. 'queue', 0, -1)) do keys[#keys + 1] = key end
for _, key in ipairs(keys) do
  jobs[#jobs + 1] = key
  jobs[#jobs + 1] = redis.call('HGETALL', P .. 'job:' .. key)
end
return {tostring(now), redis.call('ZRANGE', PROCS, 0, -1, 'WITHSCORES'), jobs,
  redis.call('HGETALL', P .. 'stats'), redis.call('LRANGE', P .. 'qwait', 0, -1),
  redis.call('LRANGE', P .. 'runs', 0, -1)}
