-- The lease: renew it and every job's TTL, report each job's state (taking an outcome of
-- one piece an awaited job left: done; ready: one of more pieces, for collect.lua), count
-- again a job ME still runs that Redis lost (restarted empty, a failover to a replica
-- behind, ME reaped after a pause), and end jobs Redis says ME owns that ME does not know,
-- among those numbered up to SEQ (a job id is "SEQ.RANDOM": an admission sent after this
-- beat's arguments were taken may run before it, not judged).
-- ARGV: ME LEASE SLOTS SEQ M (KEY ID ROLE CALLER WAITERS STARTER AGE_MS SIZE)*M PENDING-ID*
--   ROLE r: owned and running, o: owned and queued, a: awaited (CALLER, STARTER, AGE_MS,
--   SIZE unused); WAITERS: ME's callers on it, counted again where Redis lost some
--   (restarted); SIZE: its input's bytes ('': not known)
-- -> {ms until the next other lease ends (-1: none), {state, data}*M, events}
reap()
renew()
local upto, m = tonumber(ARGV[4]), tonumber(ARGV[5])
local mine, states = {}, {}
local STRIDE = 8

-- A running job of ME that Redis lost: its slot, key, caller and waiters here, again.
local function restore(key, id, caller, waiters, starter, age, size)
  local jk = jobkey(key)
  local since = NOW - age
  redis.call('HSET', jk, 'id', id, 'caller', caller, 'owner', ME, 'state', 'running',
    'qt', since, 'st', since, 'dl', 0, 'sw', starter)
  if waiters > 0 then redis.call('HSET', jk, 'w:' .. ME, waiters) end
  if size ~= '' then redis.call('HSET', jk, 'size', size) end
  redis.call('SADD', RUNNING, key)
  if not redis.call('HGET', CALLERS, caller) then redis.call('HSET', CALLERS, caller, key) end
  redis.call('PEXPIRE', jk, KEEP)
end

for i = 0, m - 1 do
  local at = 6 + STRIDE * i
  local key, id, role = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  if role ~= 'a' then mine[id] = true end
  local job = load(key)
  local state, data = 'gone', ''
  if job and job.id == id then
    state = job.state
    if role ~= 'a' then reindex(job) end
    local waiters = tonumber(ARGV[at + 4])
    if waiters > (job.w[ME] or 0) then redis.call('HSET', job.jk, 'w:' .. ME, waiters) end
  elseif role == 'r' and not job then
    restore(key, id, ARGV[at + 3], tonumber(ARGV[at + 4]), ARGV[at + 5], tonumber(ARGV[at + 6]),
      ARGV[at + 7])
    state = 'running'
  elseif role == 'a' then
    local rk = P .. 'res:' .. id
    if shaped(rk, 'hash') and redis.call('HEXISTS', rk, 'r:' .. ME) == 1 then
      state = 'ready'  -- its outcome waits for ME: read in pieces (collect.lua)
      if redis.call('HGET', rk, 'n') == '1' then  -- in one: taken here
        state, data = 'done', redis.call('HGET', rk, 'd:1') or ''
        redis.call('HDEL', rk, 'r:' .. ME)
        local left = false
        for _, name in ipairs(redis.call('HKEYS', rk)) do
          left = left or string.sub(name, 1, 2) == 'r:'
        end
        if not left then redis.call('DEL', rk) end
      end
    end
  end
  states[#states + 1] = state
  states[#states + 1] = data
end
for i = 6 + STRIDE * m, #ARGV do mine[ARGV[i]] = true end
tidy()
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
