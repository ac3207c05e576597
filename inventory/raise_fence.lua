-- Raise a SKU's stored fence to a newly issued token, before its holder writes: from then on every older
-- token is refused, although the new holder has not written yet. For locks whose fencing counters live
-- elsewhere (Redlock's masters).
-- KEYS[1] stock:{SKU}
-- ARGV[1] fencing token, > 0
-- ARGV[2] 1: a token equal to the stored fence is written again, so that the call propagates to the
--         replicas and a WAIT after it covers the write that stored it (WithReplicaAcks)
-- Returns the fence now stored. Errors: STALEFENCE <stored fence> when the token is below it (the lock's
-- counter fell behind). An unknown SKU keeps no fence, as in reserve.lua.

local token = tonumber(ARGV[1])
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') or 0
if token < fence then
  return redis.error_reply('STALEFENCE ' .. fence)
end
if (token > fence or ARGV[2] == '1') and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
  return token
end
return fence
