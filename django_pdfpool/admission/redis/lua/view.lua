-- Read only: everything in flight, the leases and the cluster's books (prelude.lua's
-- tally), for snapshots and status pages. KEYS: procs -> {now ms, {proc, lease end}*,
-- {key, {field, value}*}*, {counter, n}* (with since), queue waits ms*, run times ms*,
-- {proc, terms}* of the live processes (admit.lua refuses a process whose terms differ)}.
-- A key holding another type than the pool's reads as empty (the next mutating script
-- deletes it); the reader skips the fields it cannot parse.
local PROCS = KEYS[1]
local P = string.sub(PROCS, 1, -6)
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local READ = {zset = {'ZRANGE', 0, -1, 'WITHSCORES'}, set = {'SMEMBERS'},
  list = {'LRANGE', 0, -1}, hash = {'HGETALL'}}
local function read(key, want)
  if redis.call('TYPE', key)['ok'] ~= want then return {} end
  local command = READ[want]
  return redis.call(command[1], key, unpack(command, 2))
end
local jobs = {}
local keys = read(P .. 'running', 'set')
for _, key in ipairs(read(P .. 'queue', 'list')) do keys[#keys + 1] = key end
for _, key in ipairs(keys) do
  jobs[#jobs + 1] = key
  jobs[#jobs + 1] = read(P .. 'job:' .. key, 'hash')
end
local leases, terms, live = read(PROCS, 'zset'), read(P .. 'terms', 'hash'), {}
for i = 1, #leases, 2 do live[leases[i]] = (tonumber(leases[i + 1]) or 0) > now end
local live_terms = {}
for i = 1, #terms, 2 do
  if live[terms[i]] then
    live_terms[#live_terms + 1] = terms[i]
    live_terms[#live_terms + 1] = terms[i + 1]
  end
end
return {tostring(now), leases, jobs, read(P .. 'stats', 'hash'),
  read(P .. 'qwait', 'list'), read(P .. 'runs', 'list'), live_terms}
