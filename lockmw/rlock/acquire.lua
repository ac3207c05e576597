-- Acquire a reentrant lock in the Redisson RLock layout, with a fencing token as in Redisson's RFencedLock.
-- KEYS[1] lock hash (field = owner id, value = reentry count)
-- KEYS[2] fencing counter
-- ARGV[1] lease in milliseconds
-- ARGV[2] owner id
-- ARGV[3] fencing counter TTL in milliseconds, refreshed on every fresh acquisition; 0 or absent: none
-- Returns the token when ARGV[2] took the free lock (a bare integer: the common reply is the cheapest for Redis
-- to build), {1, token, count} when ARGV[2] held it already (a reentry, which keeps the token), or {0, pttl}
-- when another owner holds it.
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  local token = redis.call('incr', KEYS[2])
  if tonumber(ARGV[3] or '0') > 0 then
    redis.call('pexpire', KEYS[2], ARGV[3])
  end
  return token
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then -- never shorten an extended lease
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  return {1, tonumber(redis.call('get', KEYS[2]) or '0'), count}
end
return {0, redis.call('pttl', KEYS[1])}
