-- A refusal given in the pool's name without a call to admit.lua (the door's, from a
-- request's headers): counted in the cluster's books like the scripts' own. It reaps
-- first, as every script that dates the namespace's last script (prelude.lua's reap).
-- ARGV: ME LEASE SLOTS NAME (a counter: refused_busy or refused_caller) -> {events}
reap()
tally(ARGV[4], 1)
touch()
return {events}
