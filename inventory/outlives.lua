-- Whether an outcome record outlives ARGV[1] milliseconds, or does not expire: 1, else 0 (none: 0).
-- KEYS[1] order:{SKU}:<order_id>
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 or ttl >= tonumber(ARGV[1]) then return 1 end
return 0
