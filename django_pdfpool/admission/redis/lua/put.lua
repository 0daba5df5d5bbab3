-- One piece of a finished job's outcome, before finish.lua names its readers: an outcome
-- travels in pieces (link.PIECE bytes at most), so that every call fits in the timeout.
-- KEYS: res:ID; ARGV: INDEX PIECE KEEP_MS -> 1
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 'd:' .. ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
