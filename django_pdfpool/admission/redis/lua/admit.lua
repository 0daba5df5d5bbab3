-- Rules 1-3 for a new call. ARGV: ME LEASE SLOTS QUEUE WAIT_MS(-1: none) KEY CALLER ID HAS_FN
-- FINGERPRINT DEPLOYMENT SIZE('': not known) -> {status, id, state, owner, age_ms, queued,
-- events}; status is joined (the job's id, state, owner), started or queued (this call's
-- job), caller (the held job's id, state, owner, age and the jobs ahead of it in place of
-- queued; then {} and load_now(its key)), busy (then {} and load_now()), rebuilding (for a
-- lease after bad data took state: see prelude.lua), nojob (nothing to join, no fn), or
-- mismatch (ME's terms are not those of a live process of the namespace: another
-- deployment, or other settings; then {name, theirs}* follows events, and ME is not
-- registered).
local ours = {slots = ARGV[3], queue = ARGV[4], wait = ARGV[5], lease = ARGV[2],
  fingerprint = ARGV[10], deployment = ARGV[11]}
local mine = cjson.encode(ours)
local recorded_mine = nil
-- The terms of the live processes (`live(lease end)`) ME's differ from, {name, theirs}*.
local function differing(live)
  local differs = {}
  local recorded = redis.call('HGETALL', TERMS)
  for i = 1, #recorded, 2 do
    local proc, text = recorded[i], recorded[i + 1]
    if proc == ME then
      recorded_mine = text
    elseif text ~= mine then  -- the same text is the same terms; else read them
      local read, theirs = pcall(cjson.decode, text)
      local lease_end = redis.call('ZSCORE', PROCS, proc)
      if lease_end and read and type(theirs) == 'table' then
        if #differs == 0 and live(tonumber(lease_end)) then
          for _, name in ipairs(TERM_NAMES) do
            local value = theirs[name]
            if type(value) ~= 'string' or value ~= ours[name] then
              differs[#differs + 1] = name
              differs[#differs + 1] = type(value) == 'string' and value or ''
            end
          end
        end
      else  -- a process gone, or an entry that is not terms: cleaned
        redis.call('HDEL', TERMS, proc)
      end
    end
  end
  return differs
end
-- Checked before reap(), whose steps take ME's LEASE and SLOTS as the namespace's, and
-- again after it (a Redis pause moves leases on: a process may be live again).
local differs = differing(function(lease_end) return lease_end > NOW end)
if #differs == 0 then
  reap()
  differs = differing(function() return true end)
end
if #differs > 0 then  -- never merge two deployments: refuse, do not register, count nothing
  return {'mismatch', '', '', '', '0', '0', events, differs}
end
if recorded_mine ~= mine then redis.call('HSET', TERMS, ME, mine) end
renew()
local KEY, CALLER, ID = ARGV[6], ARGV[7], ARGV[8]
local job = load(KEY)
if job then  -- rule 1: join; no slot, no queue place, any caller
  redis.call('HINCRBY', job.jk, 'w:' .. ME, 1)
  if (ARGV[12] or '') ~= '' and not job.size then redis.call('HSET', job.jk, 'size', ARGV[12]) end
  tally('joined', 1)
  touch(job.jk)
  return {'joined', job.id, job.state, job.owner, '0', '0', events}
end
local queued = redis.call('LLEN', QUEUE)
if ARGV[9] ~= '1' then
  touch()
  return {'nojob', '', '', '', '0', tostring(queued), events}
end
if rebuilding() then  -- state was lost to bad data a moment ago: nothing new until rebuilt
  tally('refused_busy', 1)
  touch()
  return {'rebuilding', '', '', '', '0', tostring(queued), events}
end
local held = redis.call('HGET', CALLERS, CALLER)
if held then  -- rule 2: one job per caller, even if its starter left
  local other = load(held)
  if other and other.caller == CALLER then
    tally('refused_caller', 1)
    touch()
    local since = tonumber(other.st or other.qt) or NOW
    local ahead = other.state == 'queued' and redis.call('LPOS', QUEUE, held) or 0
    return {'caller', other.id, other.state, other.owner, tostring(NOW - since),
      tostring(ahead), events, {}, load_now(held)}
  end
  redis.call('HDEL', CALLERS, CALLER)
end
local running = redis.call('SCARD', RUNNING)
if running >= SLOTS and queued >= tonumber(ARGV[4]) then  -- full: unless some name no job
  unghost()
  running, queued = redis.call('SCARD', RUNNING), redis.call('LLEN', QUEUE)
end
if running >= SLOTS and queued >= tonumber(ARGV[4]) then  -- rule 3: a full queue refuses
  tally('refused_busy', 1)
  touch()
  return {'busy', '', '', '', '0', tostring(queued), events, {}, load_now()}
end
local jk = jobkey(KEY)
redis.call('HSET', jk, 'id', ID, 'caller', CALLER, 'owner', ME, 'qt', NOW, 'dl', 0,
  'sw', 1, 'w:' .. ME, 1)
if (ARGV[12] or '') ~= '' then redis.call('HSET', jk, 'size', ARGV[12]) end  -- for doors
redis.call('HSET', CALLERS, CALLER, KEY)
local status, state = 'started', 'running'
if running < SLOTS then
  redis.call('HSET', jk, 'state', 'running', 'st', NOW)
  redis.call('SADD', RUNNING, KEY)
  tally('started', 1, QWAITS, 0)
else
  local wait = tonumber(ARGV[5])
  redis.call('HSET', jk, 'state', 'queued', 'dl', wait >= 0 and NOW + wait or 0)
  redis.call('RPUSH', QUEUE, KEY)
  status, state = 'queued', 'queued'
end
touch(jk)
return {status, ID, state, ME, '0', tostring(queued), events}
