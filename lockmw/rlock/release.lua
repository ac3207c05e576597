-- Release one hold of a reentrant lock (Redisson RLock unlock, with its unlock latch).
-- KEYS[1] lock hash
-- KEYS[2] unlock channel (message '0' wakes waiters, as Redisson's LockPubSub expects)
-- KEYS[3] unlock latch: remembers this request's result, so a release sent again after a lost reply
--         neither takes a second reentrant hold away nor reads its own deletion as "not held"
-- ARGV[1] owner id
-- ARGV[2] lease in milliseconds (for the holds that remain)
-- ARGV[3] latch lifetime in milliseconds
-- ARGV[4] the command that sends the unlock message: 'publish', or 'spublish' (sharded pub/sub), as Redisson
--         passes it
-- Returns the holds left for ARGV[1] (0: the lock is free; -1: ARGV[1] does not hold it), or {0, clients that
-- received the unlock message} when some did (bare integers are the cheapest replies for Redis to build).
-- The latch is read on every send, not only on this package's own retries: go-redis sends a command again
-- after a lost connection (Options.MaxRetries), with the same arguments.
local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not count then
  return -1
end
if count > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then -- never shorten an extended lease
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  redis.call('set', KEYS[3], count - 1, 'px', ARGV[3])
  return count - 1
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[3], 0, 'px', ARGV[3])
local receivers = redis.call(ARGV[4], KEYS[2], '0')
if receivers > 0 then
  return {0, receivers}
end
return 0
