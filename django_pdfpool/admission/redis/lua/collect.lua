-- Read piece INDEX of ME's copy of a finished job's outcome (put.lua's pieces, then
-- finish.lua's n and readers); after the last piece, or with INDEX 0 (unread), ME's copy
-- is let go, and the last reader's deletes the outcome. KEYS: res:ID; ARGV: ME INDEX KEEP_MS
-- -> {n, the piece}, or nil (not ours to read, expired, let go, or not an outcome: deleted)
local found = redis.call('TYPE', KEYS[1])['ok']
if found ~= 'hash' then
  if found ~= 'none' then redis.call('DEL', KEYS[1]) end
  return false
end
local mine, i = 'r:' .. ARGV[1], tonumber(ARGV[2])
if redis.call('HEXISTS', KEYS[1], mine) == 0 then return false end
local n = tonumber(redis.call('HGET', KEYS[1], 'n'))
if n and (n < 1 or n ~= math.floor(n)) then n = nil end
local piece = i > 0 and n and redis.call('HGET', KEYS[1], 'd:' .. i)
if i > 0 and not piece then  -- not an outcome as finish.lua leaves one
  redis.call('DEL', KEYS[1])
  return false
end
if i > 0 and i < n then  -- more to read: kept while it is read
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {tostring(n), piece}
end
redis.call('HDEL', KEYS[1], mine)
for _, name in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(name, 1, 2) == 'r:' then return piece and {tostring(n), piece} end
end
redis.call('DEL', KEYS[1])
return piece and {tostring(n), piece}
