-- Raise a fencing counter to at least a given token: Redlock writes the token it hands out back to a quorum,
-- and a counter found behind the stock's stored fence (lost, evicted, expired) is raised past it.
-- KEYS[1] fencing counter
-- ARGV[1] token
-- ARGV[2] counter TTL in milliseconds; 0 or absent: none
-- Returns the counter after the call.
local current = tonumber(redis.call('get', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
if current >= token then
  return current
end
redis.call('set', KEYS[1], ARGV[1])
if tonumber(ARGV[2] or '0') > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
end
return token
