-- A refusal given in the pool's name without a call to admit.lua (the door's, from a
-- request's headers): counted in the cluster's books like the scripts' own. It reaps
-- first, as every script that dates the namespace's last script (prelude.lua's reap),
-- unless ME's LEASE or SLOTS are not a registered process's (admit.lua refuses ME):
-- reap()'s steps would take them as the namespace's.
-- ARGV: ME LEASE SLOTS NAME (a counter: refused_busy or refused_caller) -> {events}
local recorded = redis.call('HGETALL', TERMS)
for i = 1, #recorded, 2 do
  local read, theirs = pcall(cjson.decode, recorded[i + 1])
  if recorded[i] ~= ME and read and type(theirs) == 'table'
    and (theirs.lease ~= ARGV[2] or theirs.slots ~= ARGV[3]) then
    tally(ARGV[4], 1)
    return {events}
  end
end
reap()
tally(ARGV[4], 1)
touch()
return {events}
