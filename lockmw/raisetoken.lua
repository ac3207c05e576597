-- Raise a fencing counter to at least a given token (Redlock: the token used is written back to a quorum).
-- KEYS[1] fencing counter
-- ARGV[1] token
-- Returns the counter after the call.
local current = tonumber(redis.call('get', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
if current < token then
  redis.call('set', KEYS[1], ARGV[1])
  return token
end
return current
