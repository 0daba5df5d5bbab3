-- Take ME's copy of a finished job's outcome. KEYS: res:ID; ARGV: ME
-- -> the outcome's JSON, or nil (not ours to read, or expired)
if redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1]) == 0 then return false end
local data = redis.call('HGET', KEYS[1], 'd')
if redis.call('HLEN', KEYS[1]) <= 1 then redis.call('DEL', KEYS[1]) end
return data
