-- Run before every mutating script: names, the clock, and the steps every script shares
-- (reap ended leases, expire overdue queue heads, promote queued jobs into free slots).
-- KEYS[1] is '{namespace}:procs'; ARGV starts with ME (process id), LEASE (ms), SLOTS.
-- The keys and events are described in docs/cluster.md.
local PROCS = KEYS[1]
local P = string.sub(PROCS, 1, -6)
local RUNNING, QUEUE, CALLERS = P .. 'running', P .. 'queue', P .. 'callers'
local TERMS = P .. 'terms'  -- the settings every process of the namespace must share
local ME, LEASE, SLOTS = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local clock = redis.call('TIME')
local NOW = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local KEEP = 2 * LEASE
local events = {}
-- The cluster's books (status pages): counters, and the last RECENT queue waits and run
-- times in ms, newest first. Unlike every other key they outlive jobs: STATS_KEEP after
-- the last event, so that a quiet hour keeps its history.
local STATS, QWAITS, RUNS = P .. 'stats', P .. 'qwait', P .. 'runs'
local RECENT = 256  -- as ledger.RECENT
local STATS_KEEP = 7 * 24 * 3600 * 1000

-- Count `n` in the cluster's counter `name` and, with `list`, one duration `ms` in it.
-- The only writer of the books: each event is counted by the script that decides it.
local function tally(name, n, list, ms)
  redis.call('HSETNX', STATS, 'since', NOW)
  redis.call('HINCRBY', STATS, name, n)
  if list then
    redis.call('LPUSH', list, math.max(0, math.floor(ms)))
    redis.call('LTRIM', list, 0, RECENT - 1)
  end
  for _, key in ipairs({STATS, QWAITS, RUNS}) do redis.call('PEXPIRE', key, STATS_KEEP) end
end

local function jobkey(key) return P .. 'job:' .. key end

local function tell(proc, kind, key, id)
  if proc == ME then
    events[#events + 1] = kind
    events[#events + 1] = key
    events[#events + 1] = id
  else
    redis.call('PUBLISH', P .. 'ch:' .. proc, cjson.encode({kind, key, id}))
  end
end

local function load(key)
  local jk = jobkey(key)
  local fields = redis.call('HGETALL', jk)
  if #fields == 0 then return nil end
  local job = {key = key, jk = jk, w = {}, total = 0}
  for i = 1, #fields, 2 do
    local name, value = fields[i], fields[i + 1]
    if string.sub(name, 1, 2) == 'w:' then
      local n = tonumber(value)
      job.w[string.sub(name, 3)] = n
      job.total = job.total + n
    else
      job[name] = value
    end
  end
  return job
end

-- The job at `key` if it is still the one numbered `id` (later jobs reuse a key).
local function this(key, id)
  local job = load(key)
  if job and job.id == id then return job end
  return nil
end

local function in_flight()
  local keys = redis.call('SMEMBERS', RUNNING)
  for _, key in ipairs(redis.call('LRANGE', QUEUE, 0, -1)) do keys[#keys + 1] = key end
  return keys
end

local function forget(job)
  if job.state == 'running' then
    redis.call('SREM', RUNNING, job.key)
  else
    redis.call('LREM', QUEUE, 1, job.key)
  end
  if redis.call('HGET', CALLERS, job.caller) == job.key then
    redis.call('HDEL', CALLERS, job.caller)
  end
  redis.call('DEL', job.jk)
end

-- End a job: forget it, tell its owner and every process waiting on it (but `skip`).
-- Counted: a queued job given up (busy: each of its callers refused, its wait a queue
-- wait) or left by every waiter (dropped: abandoned).
local function conclude(job, kind, skip)
  forget(job)
  if kind == 'busy' then
    tally('refused_busy', job.total, QWAITS, NOW - tonumber(job.qt or NOW))
  elseif kind == 'dropped' then
    tally('abandoned', 1)
  end
  local told = {}
  if skip then told[skip] = true end
  if not told[job.owner] then
    told[job.owner] = true
    tell(job.owner, kind, job.key, job.id)
  end
  for proc, n in pairs(job.w) do
    if n > 0 and not told[proc] then
      told[proc] = true
      tell(proc, kind, job.key, job.id)
    end
  end
end

-- Lower the count of PROC's callers waiting on `job` by `n`; a queued job left
-- by every waiter gives up its place (rule 3).
local function unwait(job, proc, n)
  local had = job.w[proc] or 0
  local left = math.max(0, had - n)
  if left > 0 then
    redis.call('HSET', job.jk, 'w:' .. proc, left)
  else
    redis.call('HDEL', job.jk, 'w:' .. proc)
  end
  job.w[proc] = left
  job.total = job.total - had + left
  if job.state == 'queued' and job.total <= 0 then
    conclude(job, 'dropped', nil)
    return true
  end
  return false
end

local function promote()
  while redis.call('SCARD', RUNNING) < SLOTS do
    local key = redis.call('LPOP', QUEUE)
    if not key then return end
    local job = load(key)
    if job then
      redis.call('HSET', job.jk, 'state', 'running', 'st', NOW)
      redis.call('SADD', RUNNING, key)
      tally('started', 1, QWAITS, NOW - tonumber(job.qt or NOW))
      tell(job.owner, 'start', key, job.id)
    end
  end
end

local function reap()
  local dead = redis.call('ZRANGEBYSCORE', PROCS, '-inf', NOW)
  if #dead > 0 then
    local gone = {}
    for _, proc in ipairs(dead) do
      gone[proc] = true
      redis.call('ZREM', PROCS, proc)
    end
    for _, key in ipairs(in_flight()) do
      local job = load(key)
      if not job then
        redis.call('SREM', RUNNING, key)
        redis.call('LREM', QUEUE, 0, key)
      elseif gone[job.owner] then
        conclude(job, 'lost', job.owner)
      else
        for proc, n in pairs(job.w) do
          if gone[proc] and n > 0 and unwait(job, proc, n) then break end
        end
      end
    end
  end
  while true do
    local key = redis.call('LINDEX', QUEUE, 0)
    if not key then break end
    local job = load(key)
    if not job then
      redis.call('LPOP', QUEUE)
    elseif tonumber(job.dl or 0) > 0 and tonumber(job.dl or 0) <= NOW then
      conclude(job, 'busy', nil)
    else
      break
    end
  end
  promote()
end

local function touch(jk)
  for _, key in ipairs({PROCS, RUNNING, QUEUE, CALLERS, TERMS}) do
    redis.call('PEXPIRE', key, KEEP)
  end
  if jk then redis.call('PEXPIRE', jk, KEEP) end
  if redis.call('EXISTS', PROCS) == 0 then redis.call('DEL', TERMS) end  -- nobody holds them
end

local function renew() redis.call('ZADD', PROCS, NOW + LEASE, ME) end
