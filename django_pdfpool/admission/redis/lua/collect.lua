-- Take ME's copy of a finished job's outcome. KEYS: res:ID; ARGV: ME
-- -> the outcome's JSON, or nil (not ours to read, expired, or not a result: deleted)
local found = redis.call('TYPE', KEYS[1])['ok']
if found ~= 'hash' then
  if found ~= 'none' then redis.call('DEL', KEYS[1]) end
  return false
end
if redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1]) == 0 then return false end
local data = redis.call('HGET', KEYS[1], 'd')
if redis.call('HLEN', KEYS[1]) <= 1 then redis.call('DEL', KEYS[1]) end
return data
