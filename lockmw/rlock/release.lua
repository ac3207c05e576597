-- Release one hold of a reentrant lock (Redisson RLock unlock, with its unlock latch where one is needed).
-- KEYS[1] lock hash
-- KEYS[2] unlock channel (message '0' wakes waiters, as Redisson's LockPubSub expects)
-- KEYS[3] unlock latch: this request's result, for a later copy of the request (go-redis sends a command
--         again after a lost connection, Options.MaxRetries, and this package retries a release under the
--         same request id)
-- KEYS[4] fencing counter: read by a later send only
-- ARGV[1] owner id
-- ARGV[2] lease in milliseconds (for the holds that remain)
-- ARGV[3] latch lifetime in milliseconds
-- ARGV[4] the command that sends the unlock message: 'publish', or 'spublish' (sharded pub/sub), as Redisson
--         passes it
-- ARGV[5] '0' on the request's first send, '1' on every later one (the argument counts its own sends)
-- ARGV[6] the fencing token of the hold released
-- Returns the holds left for ARGV[1] (0: the lock is free; -1: ARGV[1] does not hold it), or {0, clients that
-- received the unlock message} when some did (bare integers are the cheapest replies for Redis to build).
-- Latched is only what a later copy could not tell from the lock itself. A release that leaves holds always
-- latches (the count does not say whether this request took its hold away already). The first send of the
-- last hold's release, the common case, latches nothing: a later send that finds ARGV[1] holding nothing
-- answers 0, freed by a send before it (or, if that one never ran, ended meanwhile by expiry or a force
-- release: the lock is not held either way); one that finds a hold of ARGV[1] under a counter past ARGV[6]
-- leaves it alone: a fresh acquisition drew a token since, so that hold is the owner's next one, taken after
-- a send before this one freed the hold released. Every later send latches its result, so that a copy of an
-- earlier send that reaches Redis after it (over another connection) does nothing.
local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
local again = ARGV[5] == '1'
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not count then
  if not again then
    return -1
  end
  redis.call('set', KEYS[3], 0, 'px', ARGV[3])
  return 0
end
if count > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then -- never shorten an extended lease
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  redis.call('set', KEYS[3], count - 1, 'px', ARGV[3])
  return count - 1
end
if again then
  redis.call('set', KEYS[3], 0, 'px', ARGV[3])
  if tonumber(redis.call('get', KEYS[4]) or '0') > tonumber(ARGV[6]) then
    return 0
  end
end
redis.call('del', KEYS[1])
local receivers = redis.call(ARGV[4], KEYS[2], '0')
if receivers > 0 then
  return {0, receivers}
end
return 0
