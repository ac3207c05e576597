-- The remaining lease of a lock, for its owner (Lease.TTL).
-- KEYS[1] lock hash
-- ARGV[1] owner id
-- Returns the lock's remaining time in milliseconds, or -1 when ARGV[1] does not hold it.
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  return redis.call('pttl', KEYS[1])
end
return -1
