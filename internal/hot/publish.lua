-- Adds one worker's lock waits of one second to a window of hot SKUs (package hot, doc.go).
-- KEYS[1] hot:{<window start>}        sorted set: SKU -> total wait, ms
-- KEYS[2] hot:{<window start>}:stats  hash: <SKU>:orders, <SKU>:worst_ms, <SKU>:worst_trace, <SKU>:last_trace
-- ARGV[1] lifetime of both keys after this write, ms
-- ARGV[2] most SKUs the window keeps: those of least total wait go
-- ARGV[3..] six per SKU: SKU, orders, total wait ms, worst wait ms, the worst wait's trace id ('' none),
--           the last trace id ('' none)
-- Returns how many SKUs the window dropped.
for i = 3, #ARGV, 6 do
  local sku = ARGV[i]
  redis.call('ZINCRBY', KEYS[1], ARGV[i + 2], sku)
  redis.call('HINCRBY', KEYS[2], sku .. ':orders', ARGV[i + 1])
  local worst = tonumber(redis.call('HGET', KEYS[2], sku .. ':worst_ms') or '-1')
  if tonumber(ARGV[i + 3]) > worst then
    redis.call('HSET', KEYS[2], sku .. ':worst_ms', ARGV[i + 3], sku .. ':worst_trace', ARGV[i + 4])
  end
  if ARGV[i + 5] ~= '' then
    redis.call('HSET', KEYS[2], sku .. ':last_trace', ARGV[i + 5])
  end
end
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[2])
if over > 0 then
  for _, sku in ipairs(redis.call('ZRANGE', KEYS[1], 0, over - 1)) do
    redis.call('HDEL', KEYS[2], sku .. ':orders', sku .. ':worst_ms', sku .. ':worst_trace', sku .. ':last_trace')
  end
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, over - 1)
else
  over = 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return over
