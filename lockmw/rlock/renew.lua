-- Make a lock still held by its owner last at least a lease from now (the watchdog's renewal, and
-- Lease.Extend). It never shortens the lock: an extension beyond the lease stands until it runs down.
-- KEYS[1] lock hash
-- ARGV[1] lease in milliseconds
-- ARGV[2] owner id
-- Returns 1 when renewed, 0 when ARGV[2] no longer holds the lock.
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return 0
end
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('pexpire', KEYS[1], ARGV[1])
end
return 1
