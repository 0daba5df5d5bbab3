-- Whether Redis takes this namespace's writes again (not only PING: a Redis out of memory,
-- a read-only replica or an ACL without the rights answers PING): the kinds of write the
-- scripts make, on keys deleted at once. KEYS: procs.
local probe = string.sub(KEYS[1], 1, -6) .. 'probe'
redis.call('SET', probe, '1', 'PX', 1000)
redis.call('DEL', probe)
redis.call('HSET', probe, 'f', '1')
redis.call('HINCRBY', probe, 'f', 1)
redis.call('DEL', probe)
redis.call('SADD', probe, '1')
redis.call('DEL', probe)
redis.call('RPUSH', probe, '1')
redis.call('DEL', probe)
redis.call('ZADD', probe, 1, '1')
redis.call('PEXPIRE', probe, 1000)
redis.call('DEL', probe)
return 1
