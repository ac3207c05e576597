-- Say that a consumer is live, and list the live ones: a sorted set of consumer names scored by when each
-- last said so, in Redis's own time (the workers' clocks may disagree), in milliseconds.
-- KEYS[1] the live consumers (ConsumersKey)
-- ARGV[1] consumer
-- ARGV[2] how long a consumer counts as live after it last said so, in milliseconds; the set expires
--         twice as long after the last one
-- ARGV[3] 1: the consumer is leaving (taken out, nothing listed)
-- Returns the live consumers' names.
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return {}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[2]))
return redis.call('ZRANGE', KEYS[1], 0, -1)
