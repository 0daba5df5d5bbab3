"""The Lua scripts behind ``RedisPool``: every change of shared state is one of them.

A script runs atomically in Redis, so the rules hold across every process that
shares a namespace without any lock of ours. Keys live under the prefix
``{namespace}:`` (a hash tag: one Redis Cluster slot), and KEYS[1] is always
``{namespace}:procs`` so that a cluster client routes the script to that slot.

State (all under the prefix):

- ``procs``    zset, process id -> end of its lease (ms, Redis clock)
- ``running``  set of job keys holding a slot
- ``queue``    list of job keys waiting for a slot, oldest first (FIFO across processes)
- ``callers``  hash, caller -> key of the job it holds
- ``job:KEY``  hash: id, caller, owner (process id), state (queued|running), qt/st
  (queued/started, ms), dl (queue deadline, ms; 0: none), sw (1 while the starter
  waits), ``w:PROC`` (how many callers of PROC wait on the job, the starter included)
- ``res:ID``   hash: d (the outcome as JSON), ``r:PROC`` for each process yet to read it
- channel ``ch:PROC``: events for that process, ``[kind, key, id]`` as JSON

Every mutating script starts with the same prelude: read the clock, reap the
processes whose lease ended, expire overdue queue heads and promote queued jobs
into free slots; events meant for the calling process come back in its reply
(never through pub/sub), events for others are published on their channel.
Events: ``start`` (a queued job took a slot), ``done`` (a result waits in
``res:ID``), ``busy`` (waited longer than ``wait``), ``lost`` (its owner's lease
ended), ``dropped`` (a queued job every waiter left), ``closed`` (its owner stopped).

Expiry: state keys get a TTL of two leases on every script (reaping, one lease
after a process's last renewal, always finds them); results one lease. If every
process dies, nothing outlives its last job by much more than a lease.
"""

from __future__ import annotations

PRELUDE = r"""
local PROCS = KEYS[1]
local P = string.sub(PROCS, 1, -6)
local RUNNING, QUEUE, CALLERS = P .. 'running', P .. 'queue', P .. 'callers'
local ME, LEASE, SLOTS = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local clock = redis.call('TIME')
local NOW = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local KEEP = 2 * LEASE
local events = {}

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
local function conclude(job, kind, skip)
  forget(job)
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
  for _, key in ipairs({PROCS, RUNNING, QUEUE, CALLERS}) do redis.call('PEXPIRE', key, KEEP) end
  if jk then redis.call('PEXPIRE', jk, KEEP) end
end

local function renew() redis.call('ZADD', PROCS, NOW + LEASE, ME) end
"""

# ARGV: ME LEASE SLOTS QUEUE WAIT_MS(-1: none) KEY CALLER ID HAS_FN
# -> {status, a, b, c, events}: joined id state owner | started/queued/busy queued-count
#    | caller held-state age-ms queued-count | nojob
ADMIT = r"""
reap()
renew()
local KEY, CALLER, ID = ARGV[6], ARGV[7], ARGV[8]
local job = load(KEY)
if job then  -- rule 1: join; no slot, no queue place, any caller
  redis.call('HINCRBY', job.jk, 'w:' .. ME, 1)
  touch(job.jk)
  return {'joined', job.id, job.state, job.owner, events}
end
local queued = redis.call('LLEN', QUEUE)
if ARGV[9] ~= '1' then
  touch()
  return {'nojob', '', '', '', events}
end
local held = redis.call('HGET', CALLERS, CALLER)
if held then  -- rule 2: one job per caller, even if its starter left
  local other = load(held)
  if other and other.caller == CALLER then
    touch()
    local since = tonumber(other.st or other.qt) or NOW
    return {'caller', other.state, tostring(NOW - since), tostring(queued), events}
  end
  redis.call('HDEL', CALLERS, CALLER)
end
local running = redis.call('SCARD', RUNNING)
if running >= SLOTS and queued >= tonumber(ARGV[4]) then  -- rule 3: a full queue refuses
  touch()
  return {'busy', tostring(queued), '', '', events}
end
local jk = jobkey(KEY)
redis.call('HSET', jk, 'id', ID, 'caller', CALLER, 'owner', ME, 'qt', NOW, 'dl', 0,
  'sw', 1, 'w:' .. ME, 1)
redis.call('HSET', CALLERS, CALLER, KEY)
local status = 'started'
if running < SLOTS then
  redis.call('HSET', jk, 'state', 'running', 'st', NOW)
  redis.call('SADD', RUNNING, KEY)
else
  local wait = tonumber(ARGV[5])
  redis.call('HSET', jk, 'state', 'queued', 'dl', wait >= 0 and NOW + wait or 0)
  redis.call('RPUSH', QUEUE, KEY)
  status = 'queued'
end
touch(jk)
return {status, tostring(queued), '', '', events}
"""

# ARGV: ME LEASE SLOTS KEY ID N STARTER(1|0) -> {status, events}
LEAVE = r"""
reap()
renew()
local job = load(ARGV[4])
if not job or job.id ~= ARGV[5] then
  touch()
  return {'gone', events}
end
if ARGV[7] == '1' then redis.call('HSET', job.jk, 'sw', 0) end
if not unwait(job, ME, tonumber(ARGV[6])) then touch(job.jk) end
touch()
return {'ok', events}
"""

# ARGV: ME LEASE SLOTS KEY ID DATA -> {status, events}; 'need': sharers elsewhere
# wait, call again with DATA (the outcome as JSON)
FINISH = r"""
reap()
renew()
local job = load(ARGV[4])
if not job or job.id ~= ARGV[5] then
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
if #readers > 0 then
  local rk = P .. 'res:' .. job.id
  redis.call('HSET', rk, 'd', ARGV[6])
  for _, proc in ipairs(readers) do
    redis.call('HSET', rk, 'r:' .. proc, 1)
    tell(proc, 'done', job.key, job.id)
  end
  redis.call('PEXPIRE', rk, LEASE)
end
promote()
touch()
return {'ok', events}
"""

# ARGV: ME LEASE SLOTS KEY ID -> {ms left before the deadline (-1: not queued), events}
EXPIRE = r"""
reap()
renew()
local job = load(ARGV[4])
if not job or job.id ~= ARGV[5] or job.state ~= 'queued' or tonumber(job.dl or 0) == 0 then
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
"""

# ARGV: ME LEASE SLOTS KEY ID KIND -> {events}: end a job of ours that will never run
DROP = r"""
reap()
local job = load(ARGV[4])
if job and job.id == ARGV[5] and job.owner == ME then
  conclude(job, ARGV[6], ME)
  promote()
end
touch()
return {events}
"""

# ARGV: ME LEASE SLOTS SEQ M (KEY ID ROLE)*M PENDING-ID* ; ROLE o: owned, a: awaited
# -> {ms until the next other lease ends (-1: none), {state, data}*M, events}
# Renews the lease and every job's TTL; reports each job's state (collecting a
# result an awaited job left); ends jobs Redis says we own but we do not know,
# among those numbered up to SEQ (a job id is "SEQ.RANDOM": an admission sent
# after this beat's arguments were taken may run before it, and is not judged).
BEAT = r"""
reap()
renew()
local upto, m = tonumber(ARGV[4]), tonumber(ARGV[5])
local mine, states = {}, {}
for i = 0, m - 1 do
  local key, id, role = ARGV[6 + 3 * i], ARGV[7 + 3 * i], ARGV[8 + 3 * i]
  if role == 'o' then mine[id] = true end
  local job = load(key)
  local state, data = 'gone', ''
  if job and job.id == id then
    state = job.state
  elseif role == 'a' then
    local rk = P .. 'res:' .. id
    if redis.call('HDEL', rk, 'r:' .. ME) == 1 then
      state, data = 'done', redis.call('HGET', rk, 'd') or ''
      if redis.call('HLEN', rk) <= 1 then redis.call('DEL', rk) end
    end
  end
  states[#states + 1] = state
  states[#states + 1] = data
end
for i = 6 + 3 * m, #ARGV do mine[ARGV[i]] = true end
for _, key in ipairs(in_flight()) do
  local job = load(key)
  if job then
    local seq = tonumber(string.match(job.id, '^(%d+)%.') or '0')
    if job.owner == ME and not mine[job.id] and seq <= upto then
      conclude(job, 'lost', ME)
    else
      redis.call('PEXPIRE', job.jk, KEEP)
    end
  end
end
promote()
touch()
local next_ms = -1
local soon = redis.call('ZRANGE', PROCS, 0, 1, 'WITHSCORES')
for i = 1, #soon, 2 do
  if soon[i] ~= ME then
    next_ms = tonumber(soon[i + 1]) - NOW
    break
  end
end
return {tostring(next_ms), states, events}
"""

# ARGV: ME LEASE SLOTS -> {events}: this process leaves; whatever Redis still holds
# for it (it is idle: only leftovers of failed calls) ends.
UNREGISTER = r"""
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
promote()
touch()
return {events}
"""

# KEYS: res:ID; ARGV: ME -> the outcome's JSON, or nil (not ours to read, or expired)
COLLECT = r"""
if redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1]) == 0 then return false end
local data = redis.call('HGET', KEYS[1], 'd')
if redis.call('HLEN', KEYS[1]) <= 1 then redis.call('DEL', KEYS[1]) end
return data
"""

# KEYS: procs -> {now ms, {proc, lease end}*, {key, {field, value}*}*} (read only)
VIEW = r"""
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
return {tostring(now), redis.call('ZRANGE', PROCS, 0, -1, 'WITHSCORES'), jobs}
"""

MUTATING = {
    "admit": ADMIT,
    "leave": LEAVE,
    "finish": FINISH,
    "expire": EXPIRE,
    "drop": DROP,
    "beat": BEAT,
    "unregister": UNREGISTER,
}


def source(name: str) -> str:
    """The full source of a mutating script: the prelude, then its body."""
    return PRELUDE + MUTATING[name]
