-- Read the stock of a SKU.
-- KEYS[1] stock:{SKU}  hash: available, reserved, fence, fulfilled
-- Returns {available, reserved, fence, fulfilled}, each nil when the field is missing (as stock.Read
-- reads them with the same HMGET; stock.Decode reads the reply).

return redis.call('HMGET', KEYS[1], 'available', 'reserved', 'fence', 'fulfilled')
