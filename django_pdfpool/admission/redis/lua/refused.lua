-- A refusal given in the pool's name without a call to admit.lua (the door's, from a
-- request's headers): counted in the cluster's books like the scripts' own.
-- ARGV: ME LEASE SLOTS NAME (a counter: refused_busy or refused_caller) -> {}
tally(ARGV[4], 1)
if redis.call('EXISTS', PROCS) == 0 then redis.call('DEL', TICK) end  -- nobody to date
return {}
