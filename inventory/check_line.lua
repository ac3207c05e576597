-- The stock fields of a line that the scripts increment, and 1 when the order's record for it is that of a
-- cancel that came first (cancel_early.lua), else 0.
-- KEYS[1] stock:{SKU}; KEYS[2] order:{SKU}:<order_id>
-- Returns {available, reserved, fulfilled, early}.
local st = redis.call('HMGET', KEYS[1], 'available', 'reserved', 'fulfilled')
local rec = redis.call('GET', KEYS[2])
st[4] = (rec and string.find(rec, '"early":true', 1, true)) and 1 or 0
return st
