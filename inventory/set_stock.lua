-- Set the available stock of a SKU, creating it if needed.
-- KEYS[1] stock:{SKU}  hash: available, reserved, fence
-- ARGV[1] available, 0..MaxStock
-- reserved starts at 0 on a new SKU; an existing reserved count and fence stay as they are.
-- Returns 1.

redis.call('HSET', KEYS[1], 'available', ARGV[1])
redis.call('HSETNX', KEYS[1], 'reserved', 0)
return 1
