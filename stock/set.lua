-- Set the available stock of a SKU, creating it if needed, once per request (Set, SetScript).
-- KEYS[1] stock:{SKU}                       hash: available, reserved, fence
-- KEYS[2] stock:{SKU}:latch:<request id>    string: set once the request ran, so that a resend after a lost
--                                           reply does not set available again over the reservations made
--                                           since (go-redis sends a command again after a lost connection)
-- ARGV[1] available, 0..MaxStock
-- ARGV[2] latch lifetime in milliseconds
-- ARGV[3] 1: a resend rewrites the latch as it is (WithReplicaAcks), as in restock.lua
-- reserved starts at 0 on a new SKU; an existing reserved count and fence stay as they are.
-- Returns 1.

local done = redis.call('GET', KEYS[2])
if done then
  if ARGV[3] == '1' then redis.call('SET', KEYS[2], done, 'KEEPTTL') end
  return 1
end
redis.call('HSET', KEYS[1], 'available', ARGV[1])
redis.call('HSETNX', KEYS[1], 'reserved', 0)
redis.call('SET', KEYS[2], 1, 'PX', ARGV[2])
return 1
