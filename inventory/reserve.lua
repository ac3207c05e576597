-- Reserve stock for one order, at most once.
-- KEYS[1] stock:{SKU}             hash: available, reserved, fence
-- KEYS[2] order:{SKU}:<order_id>  string: the outcome recorded for the order (JSON)
-- KEYS[3] optional: the lock's fencing counter (same slot); a token below it is stale although the newer
--         holder may not have written yet
-- ARGV[1] quantity, 1..MaxQuantity
-- ARGV[2] fencing token, 0 = unfenced
-- ARGV[3] outcome TTL in milliseconds
-- ARGV[4] 1: a replay rewrites the record as it is (value and TTL), so that the call propagates to the
--         replicas and a WAIT after it covers the write that recorded the outcome (WithReplicaAcks);
--         otherwise a replay writes nothing
-- ARGV[5] optional: more members of the record, as JSON text starting with a comma (a basket's line:
--         ,"lines":[...] on its first SKU, ,"anchor":"<first SKU>" on the others; see lines.go)
-- Returns {replayed (0|1), status, reason, quantity, available_after, fence}.
-- Errors: STALEFENCE <stored fence>, STALETOKEN <current token>, CORRUPT <field>, IDCONFLICT 1 (the
-- record is another order's: a basket's line for a single-SKU call, or another basket's). Every check
-- runs before the first write, so an error leaves Redis untouched.

local record = redis.call('GET', KEYS[2])
if record then
  -- Redelivery: the first decision stands, even if this call asks for another quantity.
  local o = cjson.decode(record)
  if not same(o, ARGV[5]) then return redis.error_reply('IDCONFLICT 1') end
  if ARGV[4] == '1' then redis.call('SET', KEYS[2], record, 'KEEPTTL') end
  return {1, o.status, o.reason, o.quantity, o.available_after, o.fence}
end

local quantity = tonumber(ARGV[1])
local token = tonumber(ARGV[2])
local stock = redis.call('HMGET', KEYS[1], 'available', 'reserved', 'fence')
local fence = tonumber(stock[3])
local err = stale(token, stock[3], KEYS[3])
if err then return redis.error_reply(err) end

local status, reason, after = 'rejected', 'unknown_sku', 0
if stock[1] then
  -- HINCRBY fails on a non-integer, and a failure after a write would leave a partial update.
  if not int(stock[1]) then return redis.error_reply('CORRUPT available') end
  if stock[2] and not int(stock[2]) then return redis.error_reply('CORRUPT reserved') end
  local available = tonumber(stock[1])
  if available >= quantity then
    status, reason = 'reserved', ''
    after = redis.call('HINCRBY', KEYS[1], 'available', -quantity)
    redis.call('HINCRBY', KEYS[1], 'reserved', quantity)
  else
    reason, after = 'insufficient_stock', available
  end
  -- Raise only. An unknown SKU keeps no fence: that would leave a stock hash behind for every typo.
  if token > (fence or 0) then
    redis.call('HSET', KEYS[1], 'fence', ARGV[2])
  end
end

-- Built by hand rather than with cjson: cheaper, and %d keeps integers exact where cjson would print
-- large numbers in exponent form.
redis.call('SET', KEYS[2], string.format(
  '{"status":"%s","reason":"%s","quantity":%d,"available_after":%d,"fence":%d%s}',
  status, reason, quantity, after, token, ARGV[5] or ''), 'PX', ARGV[3])
return {0, status, reason, quantity, after, token}
