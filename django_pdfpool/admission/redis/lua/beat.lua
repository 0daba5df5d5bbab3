-- The lease: renew it and every job's TTL, report each job's state (collecting a result an
-- awaited job left), and end jobs Redis says ME owns that ME does not know, among those
-- numbered up to SEQ (a job id is "SEQ.RANDOM": an admission sent after this beat's
-- arguments were taken may run before it, and is not judged).
-- ARGV: ME LEASE SLOTS SEQ M (KEY ID ROLE)*M PENDING-ID*  (ROLE o: owned, a: awaited)
-- -> {ms until the next other lease ends (-1: none), {state, data}*M, events}
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
