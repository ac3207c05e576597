-- Add to the available stock of a SKU, creating it if needed, once per request.
-- KEYS[1] stock:{SKU}                       hash: available, reserved, fence
-- KEYS[2] stock:{SKU}:latch:<request id>    string: this request's reply once it ran, so that a resend after a
--                                           lost reply (go-redis sends a command again after a lost connection)
--                                           returns it instead of adding again
-- ARGV[1] quantity to add, 1..MaxStock
-- ARGV[2] MaxStock, the most available may reach
-- ARGV[3] latch lifetime in milliseconds
-- ARGV[4] 1: a resend rewrites the latch as it is, so that it propagates and a WAIT after it covers the
--         write (WithReplicaAcks)
-- Returns the new available count.
-- Errors: OVERSTOCK <available>, CORRUPT available. Checked before the first write.

local done = redis.call('GET', KEYS[2])
if done then
  if ARGV[4] == '1' then redis.call('SET', KEYS[2], done, 'KEEPTTL') end
  return tonumber(done)
end
local current = redis.call('HGET', KEYS[1], 'available') or '0'
if not int(current) then return redis.error_reply('CORRUPT available') end
if tonumber(current) + tonumber(ARGV[1]) > tonumber(ARGV[2]) then
  return redis.error_reply('OVERSTOCK ' .. current)
end
-- HINCRBY first: it is the only call that can fail, and it fails before anything was written.
local available = redis.call('HINCRBY', KEYS[1], 'available', ARGV[1])
redis.call('HSETNX', KEYS[1], 'reserved', 0)
redis.call('SET', KEYS[2], available, 'PX', ARGV[3])
return available
