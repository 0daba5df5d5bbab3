-- Read only: the pool's counts and what a door decides on before a body is read, in one
-- round trip. KEYS: procs; ARGV: KEY CALLER ('' for none, else '=' and the name) ->
-- {running, queued, KEY's job in flight (0/1), busy (1: the caller holds a job for another
-- key, and admit.lua would refuse it), its state, ms since it queued or started, jobs ahead
-- of it in the queue, callers waiting on KEY's job in every process less its starter, the
-- load (prelude.lua's load_now(the caller's job)), the sizes of the jobs in flight ("1,2";
-- "?": one not known)}. Bad data reads as nothing.
local P = string.sub(KEYS[1], 1, -6)
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local function typed(key, want) return redis.call('TYPE', key)['ok'] == want end
local function whole(value)  -- a count as the scripts store it, or nil
  local n = tonumber(value)
  if n and n == math.floor(n) and n > -1e15 and n < 1e15 then return n end
  return nil
end
local running = typed(P .. 'running', 'set') and redis.call('SCARD', P .. 'running') or 0
local queued = typed(P .. 'queue', 'list') and redis.call('LLEN', P .. 'queue') or 0
local function named(arg) return arg ~= '' and string.sub(arg, 2) or nil end
local KEY, CALLER = named(ARGV[1]), named(ARGV[2])
local listed, sizes = {}, {}
if typed(P .. 'running', 'set') then listed = redis.call('SMEMBERS', P .. 'running') end
if typed(P .. 'queue', 'list') then
  for _, key in ipairs(redis.call('LRANGE', P .. 'queue', 0, -1)) do listed[#listed + 1] = key end
end
for _, key in ipairs(listed) do
  local size = typed(P .. 'job:' .. key, 'hash') and whole(redis.call('HGET', P .. 'job:' .. key, 'size'))
  if not size then sizes = nil break end
  sizes[#sizes + 1] = tostring(size)
end
local SIZES = sizes and table.concat(sizes, ',') or '?'
local in_flight = KEY and typed(P .. 'job:' .. KEY, 'hash') and 1 or 0
local waiting = 0
if in_flight == 1 then
  local fields = redis.call('HGETALL', P .. 'job:' .. KEY)
  local starter = 0
  for i = 1, #fields, 2 do
    local n = whole(fields[i + 1])
    if string.sub(fields[i], 1, 2) == 'w:' and n and n > 0 then waiting = waiting + n end
    if fields[i] == 'sw' and n and n > 0 then starter = n end
  end
  waiting = math.max(0, waiting - starter)
end
local function field(key, name)  -- a job's time field, or nil
  return typed(P .. 'job:' .. key, 'hash') and whole(redis.call('HGET', P .. 'job:' .. key, name))
end
local load = {now, queued > 0 and field(redis.call('LINDEX', P .. 'queue', 0), 'qt') or -1, -1}
local took = typed(P .. 'runs', 'list') and redis.call('LRANGE', P .. 'runs', 0, 31) or {}
load[#load + 1] = #took  -- as many as load_now's SEED
for _, ms in ipairs(took) do load[#load + 1] = whole(ms) or 0 end
if running > 0 then
  for _, key in ipairs(redis.call('SMEMBERS', P .. 'running')) do
    local start = field(key, 'st')
    if start then
      load[#load + 1] = start
      load[#load + 1] = field(key, 'size') or -1
    end
  end
end
local held = CALLER and in_flight == 0 and typed(P .. 'callers', 'hash')
  and redis.call('HGET', P .. 'callers', CALLER)
if not held or held == KEY or not typed(P .. 'job:' .. held, 'hash') then
  return {running, queued, in_flight, 0, '', 0, 0, waiting, load, SIZES}
end
local job = redis.call('HMGET', P .. 'job:' .. held, 'caller', 'state', 'qt', 'st')
if job[1] ~= CALLER then return {running, queued, in_flight, 0, '', 0, 0, waiting, load, SIZES} end
load[3] = field(held, 'size') or -1
local since = tonumber(job[4] or job[3]) or now
local ahead = 0
if job[2] == 'queued' then ahead = redis.call('LPOS', P .. 'queue', held) or 0 end
return {running, queued, in_flight, 1, tostring(job[2]), now - since, ahead, waiting, load, SIZES}
