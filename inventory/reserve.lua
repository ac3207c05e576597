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

-- A stock field HINCRBY takes: an integer as Redis writes it (no leading zero, no -0), far from the int64
-- limits. A field that passed this check cannot fail the script's increments halfway.
local function int(v)
  return (v == '0' or string.find(v, '^%-?[1-9]%d*$') ~= nil) and #v <= 20 and math.abs(tonumber(v)) < 4e18
end

-- Whether record o was written for the order of this call, whose record members are extra (ARGV): the
-- line of a basket has the same anchor, or on the basket's first SKU lines of the same SKUs; a single-SKU
-- order (no members) has neither. An order id reused for another order must not replay its records.
local function same(o, extra)
  if o.early then return true end -- a cancel that came first (cancel_early.lua): any order of the id
  local want = {}
  if extra and extra ~= '' then want = cjson.decode('{' .. string.sub(extra, 2) .. '}') end
  if want.anchor or o.anchor then return want.anchor == o.anchor end
  if not want.lines or not o.lines then return want.lines == nil and o.lines == nil end
  if #want.lines ~= #o.lines then return false end
  for i, l in ipairs(want.lines) do
    if o.lines[i].sku ~= l.sku then return false end
  end
  return true
end

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
if token > 0 and fence and token < fence then
  return redis.error_reply('STALEFENCE ' .. stock[3])
end
if token > 0 and KEYS[3] then
  local current = tonumber(redis.call('GET', KEYS[3]) or '')
  if current and token < current then
    return redis.error_reply('STALETOKEN ' .. current)
  end
end

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
