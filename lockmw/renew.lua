-- Extend the lease of a lock still held by its owner (the watchdog's renewal).
-- KEYS[1] lock hash
-- ARGV[1] lease in milliseconds
-- ARGV[2] owner id
-- Returns 1 when renewed, 0 when ARGV[2] no longer holds the lock.
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  return redis.call('pexpire', KEYS[1], ARGV[1])
end
return 0
