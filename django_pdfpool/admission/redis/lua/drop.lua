-- End a job of ME that will never run (every waiter left, closed, lost).
-- ARGV: ME LEASE SLOTS KEY ID KIND -> {events}
reap()
local job = this(ARGV[4], ARGV[5])
if job and job.owner == ME then
  conclude(job, ARGV[6], ME)
  promote()
end
touch()
return {events}
