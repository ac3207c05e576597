-- Read the stock of a SKU.
-- KEYS[1] stock:{SKU}  hash: available, reserved, fence, fulfilled
-- Returns {available, reserved, fence, fulfilled}, each nil when the field is missing (stockFields in
-- stock.Fields, which stock.Read reads with the same HMGET).

return redis.call('HMGET', KEYS[1], 'available', 'reserved', 'fence', 'fulfilled')
