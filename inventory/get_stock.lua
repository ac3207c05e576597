-- Read the stock of a SKU.
-- KEYS[1] stock:{SKU}  hash: available, reserved, fence
-- Returns {available, reserved, fence}, each nil when the field is missing.

return redis.call('HMGET', KEYS[1], 'available', 'reserved', 'fence')
