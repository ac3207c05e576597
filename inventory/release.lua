-- Give a reserved quantity back, at most once (compensation for a cancelled order).
-- KEYS[1] stock:{SKU}             hash: available, reserved, fence
-- KEYS[2] order:{SKU}:<order_id>  string: the outcome recorded for the order (JSON)
-- KEYS[3] optional: the lock's fencing counter (same slot), as in reserve.lua
-- ARGV[1] fencing token, 0 = unfenced
-- ARGV[2] 1: a replay rewrites the record as it is, as in reserve.lua; otherwise it writes nothing
-- Returns {replayed (0|1), status, reason, quantity, available_after, fence}.
-- Errors: NOTRESERVED <status|none>, STALEFENCE <stored fence>, STALETOKEN <current token>, UNKNOWNSKU, CORRUPT <field>. Every
-- check runs before the first write, so an error leaves Redis untouched.

local record = redis.call('GET', KEYS[2])
if not record then return redis.error_reply('NOTRESERVED none') end
local o = cjson.decode(record)
if o.status == 'released' then
  if ARGV[2] == '1' then redis.call('SET', KEYS[2], record, 'KEEPTTL') end
  return {1, o.status, o.reason, o.quantity, o.available_after, o.fence}
end
if o.status ~= 'reserved' then return redis.error_reply('NOTRESERVED ' .. o.status) end

local token = tonumber(ARGV[1])
local stock = redis.call('HMGET', KEYS[1], 'available', 'reserved', 'fence')
local fence = tonumber(stock[3])
local err = stale(token, stock[3], KEYS[3])
if err then return redis.error_reply(err) end
if not stock[1] then return redis.error_reply('UNKNOWNSKU') end
if not int(stock[1]) then return redis.error_reply('CORRUPT available') end
if stock[2] and not int(stock[2]) then return redis.error_reply('CORRUPT reserved') end

local after = redis.call('HINCRBY', KEYS[1], 'available', o.quantity)
redis.call('HINCRBY', KEYS[1], 'reserved', -o.quantity)
if token > (fence or 0) then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
redis.call('SET', KEYS[2], string.format(
  '{"status":"released","reason":"","quantity":%d,"available_after":%d,"fence":%d%s}',
  o.quantity, after, token, string.match(record, '"fence":%-?%d+(.*)}$') or ''), 'KEEPTTL')
return {0, 'released', '', o.quantity, after, token}
