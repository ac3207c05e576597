-- Read an order's outcome record. A script rather than GET: the store's client is a redis.Scripter.
-- KEYS[1] order:{SKU}:<order_id>
return redis.call('GET', KEYS[1])
