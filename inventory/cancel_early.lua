-- Remember a cancel that came before its order: the order has no record for the SKU the cancel names
-- (not reserved yet, its reservation behind the cancel in the stream). The record written, cancelled and
-- marked early, is what the order's reservation then finds: a single-SKU order replays it, a basket is
-- cancelled whole (lines.go) and reserves nothing.
-- KEYS[1] order:{SKU}:<order_id>
-- ARGV[1] outcome TTL in milliseconds
-- ARGV[2] the cancel's fencing token (0 = unfenced), recorded as the record's fence
-- Returns 1 when it wrote the record, 0 when it was there already (a second such cancel).
-- Errors: NOTEARLY (the order has a record of its own for the SKU: it came after all).
local early = string.format(
  '{"status":"cancelled","reason":"cancelled_early","quantity":0,"available_after":0,"fence":%d,"early":true}',
  ARGV[2])
if redis.call('SET', KEYS[1], early, 'NX', 'PX', ARGV[1]) then return 1 end
if string.find(redis.call('GET', KEYS[1]), '"early":true', 1, true) then return 0 end
return redis.error_reply('NOTEARLY')
