-- Delete a lock whoever holds it and wake its waiters (Redisson forceUnlock), for operators.
-- KEYS[1] lock hash
-- KEYS[2] unlock channel
-- KEYS[3] request latch: remembers this request's result, so that a resend after a lost reply answers the
--         same instead of deleting a lock taken in between
-- ARGV[1] the command that sends the unlock message: 'publish' or 'spublish'
-- ARGV[2] latch lifetime in milliseconds
-- Returns 1 when a lock was deleted, 0 when there was none.
local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
local deleted = redis.call('del', KEYS[1])
if deleted == 1 then
  redis.call(ARGV[1], KEYS[2], '0')
end
redis.call('set', KEYS[3], deleted, 'px', ARGV[2])
return deleted
