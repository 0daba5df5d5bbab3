-- Run before every mutating script: names, the clock, and the steps every script shares
-- (reap ended leases, expire overdue queue heads, promote queued jobs into free slots).
-- KEYS[1] is '{namespace}:procs'; ARGV starts with ME (process id), LEASE (ms), SLOTS.
-- The keys and events are described in docs/cluster.md.
local PROCS = KEYS[1]
local P = string.sub(PROCS, 1, -6)
local RUNNING, QUEUE, CALLERS = P .. 'running', P .. 'queue', P .. 'callers'
local TERMS = P .. 'terms'  -- each live process's terms (JSON): they must all be the same
local TERM_NAMES = {'slots', 'queue', 'wait', 'lease', 'fingerprint', 'deployment'}
local TICK = P .. 'tick'  -- when the namespace's last mutating script ran (ms)
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
local SEED = 32  -- the latest run times a process new to the cluster estimates from (load_now)
local STATS_KEEP = 7 * 24 * 3600 * 1000

-- A whole number (ms, counts) from a stored value, or nil for anything else.
local function whole(value)
  local n = tonumber(value)
  if n and n == math.floor(n) and n > -1e15 and n < 1e15 then return n end
  return nil
end

-- The first write of every mutating script, before anything changes: a Redis that refuses
-- writes (out of memory under noeviction, a read-only replica) refuses the script here,
-- whole, never half-run. TICK also dates the last script, for reap().
local LAST_TICK = whole(redis.pcall('GET', TICK))  -- nil: none, or not a number
redis.call('SET', TICK, NOW, 'PX', KEEP)

-- Bad data (written by hand, by another program, by a bug): a key of the namespace that
-- does not hold the type the pool keeps there is deleted, never a script's error; a job
-- whose fields make no sense is dropped (``load``); the owners' beats count again what
-- still runs (``reindex``, ``restore``). Until they have (one lease), REBUILD is set: no
-- job starts and new calls are refused as busy, so that no limit is broken meanwhile.
local REBUILD = P .. 'rebuild'
local rebuild_ttl = redis.call('PTTL', REBUILD)
if rebuild_ttl == -1 or rebuild_ttl > LEASE then  -- not ours: no TTL, or too long a one
  redis.call('DEL', REBUILD)
  rebuild_ttl = -2
end
local REBUILDING = rebuild_ttl >= 0
local function damaged()
  redis.call('SET', REBUILD, NOW, 'PX', LEASE)
  REBUILDING = true
end
local function rebuilding() return REBUILDING end

-- Whether `key` holds `want` (false: nothing there); a key holding another type is
-- deleted, and true returned for it in the second result.
local function shaped(key, want)
  local found = redis.call('TYPE', key)['ok']
  if found == want or found == 'none' then return found == want, false end
  redis.call('DEL', key)
  return false, true
end
for _, key in ipairs({RUNNING, QUEUE, CALLERS}) do  -- what ran, queued or held a caller
  local _, deleted = shaped(key, key == CALLERS and 'hash' or key == QUEUE and 'list' or 'set')
  if deleted then damaged() end  -- is known again after the owners' beats
end
shaped(PROCS, 'zset')
shaped(TERMS, 'hash')
local books_shaped = false  -- the books' keys are checked once, by the first tally

-- Count `n` in the cluster's counter `name` and, with `list`, one duration `ms` in it.
-- `name` is a Counter of django_pdfpool/admission/counters.py (tests/test_counters.py checks).
-- The only writer of the books: each event is counted by the script that decides it.
local function tally(name, n, list, ms)
  if not books_shaped then
    shaped(STATS, 'hash')
    shaped(QWAITS, 'list')
    shaped(RUNS, 'list')
    books_shaped = true
  end
  if not whole(redis.call('HGET', STATS, 'since')) then redis.call('HSET', STATS, 'since', NOW) end
  local counted = redis.pcall('HINCRBY', STATS, name, n)
  if type(counted) == 'table' and counted.err then redis.call('HSET', STATS, name, n) end
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

local STATES = {queued = true, running = true}

-- The job at `key`, its waiter counts in `w` (and their `total`), or nil. A job whose
-- fields are not the pool's is dropped here (and out of the running set, the queue and
-- the callers); a waiter count that is not a whole number >= 0 is removed.
local function load(key)
  local jk = jobkey(key)
  if not shaped(jk, 'hash') then return nil end
  local fields = redis.call('HGETALL', jk)
  local job = {key = key, jk = jk, w = {}, total = 0}
  for i = 1, #fields, 2 do
    local name, value = fields[i], fields[i + 1]
    if string.sub(name, 1, 2) == 'w:' then
      local n = whole(value)
      if n and n >= 0 then
        job.w[string.sub(name, 3)] = n
        job.total = job.total + n
      else
        redis.call('HDEL', jk, name)
      end
    else
      job[name] = value
    end
  end
  for _, name in ipairs({'dl', 'sw'}) do  -- a deadline, a flag: none, if not a number
    if job[name] ~= nil and not whole(job[name]) then
      job[name] = '0'
      redis.call('HSET', jk, name, 0)
    end
  end
  local sound = (job.id or '') ~= '' and (job.owner or '') ~= '' and job.caller ~= nil
    and STATES[job.state] and whole(job.qt) and (job.state ~= 'running' or whole(job.st))
  if not sound then
    damaged()
    redis.call('DEL', jk)
    redis.call('SREM', RUNNING, key)
    redis.call('LREM', QUEUE, 0, key)
    if job.caller and redis.call('HGET', CALLERS, job.caller) == key then
      redis.call('HDEL', CALLERS, job.caller)
    end
    return nil
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

-- Members of the running set and the queue that are not jobs in that state: removed; a
-- process named by a job (its owner, or waiting on it) without a lease gets one lease, in
-- which it renews it or is reaped with what it holds (run by every beat).
local function tidy()
  local function adopt(job)
    redis.call('ZADD', PROCS, 'NX', NOW + LEASE, job.owner)
    for proc in pairs(job.w) do redis.call('ZADD', PROCS, 'NX', NOW + LEASE, proc) end
  end
  for _, key in ipairs(redis.call('SMEMBERS', RUNNING)) do
    local job = load(key)
    if not job or job.state ~= 'running' then redis.call('SREM', RUNNING, key) end
    if job then adopt(job) end
  end
  for _, key in ipairs(redis.call('LRANGE', QUEUE, 0, -1)) do
    local job = load(key)
    if not job or job.state ~= 'queued' then redis.call('LREM', QUEUE, 0, key) end
    if job then adopt(job) end
  end
end

-- Members of the running set and the queue that name no job: removed (where a full pool
-- would refuse, at most once a beat: TIDIED; the beat's tidy() does the rest).
local TIDIED = P .. 'tidied'
local function unghost()
  if not redis.call('SET', TIDIED, NOW, 'NX', 'PX', math.max(1, math.floor(LEASE / 3))) then
    return
  end
  for _, key in ipairs(redis.call('SMEMBERS', RUNNING)) do
    if redis.call('EXISTS', jobkey(key)) == 0 then redis.call('SREM', RUNNING, key) end
  end
  for _, key in ipairs(redis.call('LRANGE', QUEUE, 0, -1)) do
    if redis.call('EXISTS', jobkey(key)) == 0 then redis.call('LREM', QUEUE, 0, key) end
  end
end

-- A job's place in the running set or the queue, and its caller's hold, as its hash says
-- (bad data may have taken them): put back by its owner's beat.
local function reindex(job)
  if job.state == 'running' then
    redis.call('SADD', RUNNING, job.key)
  elseif not redis.call('LPOS', QUEUE, job.key) then
    redis.call('RPUSH', QUEUE, job.key)
  end
  if not redis.call('HGET', CALLERS, job.caller) then
    redis.call('HSET', CALLERS, job.caller, job.key)
  end
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
  if rebuilding() then return end
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

-- Leases and queue deadlines end on Redis's clock, but only while Redis runs the
-- namespace's scripts: a silence longer than a beat (lease/3: Redis paused, its clock
-- stepped forward, every process stalled) moves every lease and deadline on by what
-- exceeds the beat, so that a Redis pause ends no lease of a live process and a clock step
-- no queued job's wait; a clock stepped back moves them back by the step. A lease ending
-- more than LEASE ahead (bad data) ends LEASE from now.
local function reap()
  local last = LAST_TICK
  local beat = math.floor(LEASE / 3)
  if last and (NOW - last > beat or NOW < last) then
    local moved = NOW < last and NOW - last or NOW - last - beat
    local leases = redis.call('ZRANGE', PROCS, 0, -1, 'WITHSCORES')
    for i = 1, #leases, 2 do
      redis.call('ZADD', PROCS, tonumber(leases[i + 1]) + moved, leases[i])
    end
    for _, key in ipairs(redis.call('LRANGE', QUEUE, 0, -1)) do
      local job = load(key)
      local due = tonumber(job and job.dl or 0)
      if due > 0 then redis.call('HSET', job.jk, 'dl', due + moved) end
    end
  end
  for _, proc in ipairs(redis.call('ZRANGEBYSCORE', PROCS, '(' .. (NOW + LEASE), '+inf')) do
    redis.call('ZADD', PROCS, NOW + LEASE, proc)
  end
  local dead = redis.call('ZRANGEBYSCORE', PROCS, '-inf', NOW)
  if #dead > 0 then
    local gone = {}
    for _, proc in ipairs(dead) do
      gone[proc] = true
      redis.call('ZREM', PROCS, proc)
      redis.call('HDEL', TERMS, proc)
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

-- No process left in the namespace: its bookkeeping goes too.
local function vacate()
  if redis.call('EXISTS', PROCS) == 0 then redis.call('DEL', TERMS, TICK, REBUILD, TIDIED) end
end

local function touch(jk)
  for _, key in ipairs({PROCS, RUNNING, QUEUE, CALLERS, TERMS}) do
    redis.call('PEXPIRE', key, KEEP)
  end
  if jk then redis.call('PEXPIRE', jk, KEEP) end
  vacate()
end

local function renew() redis.call('ZADD', PROCS, NOW + LEASE, ME) end

-- What a Retry-After is estimated from, as pressure.lua reads it too: {NOW, the queue head's
-- queue time or -1, the size of `held`'s job or -1, N, the cluster's N latest run times,
-- then each running job's start and size or -1} (ms, bytes); a running job whose start is
-- no number is left out.
local function load_now(held)
  local function size(key)
    return key and whole(redis.pcall('HGET', jobkey(key), 'size')) or -1
  end
  local head = redis.call('LINDEX', QUEUE, 0)
  local found = {NOW, head and whole(redis.pcall('HGET', jobkey(head), 'qt')) or -1, size(held)}
  local runs = redis.pcall('LRANGE', RUNS, 0, SEED - 1)
  if type(runs) ~= 'table' or runs.err then runs = {} end
  found[#found + 1] = #runs
  for _, ms in ipairs(runs) do found[#found + 1] = whole(ms) or 0 end
  for _, key in ipairs(redis.call('SMEMBERS', RUNNING)) do
    local start = whole(redis.pcall('HGET', jobkey(key), 'st'))
    if start then
      found[#found + 1] = start
      found[#found + 1] = size(key)
    end
  end
  return found
end
