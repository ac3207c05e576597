-- Set the idle time of a pending stream entry, if the consumer still owns it (XCLAIM to itself, JUSTID so
-- the delivery count stays): 0 keeps an entry being worked on from being claimed; a larger idle time gives a
-- failed attempt back, to be claimed by any consumer once it reaches the claim idle time.
-- KEYS[1] stream
-- ARGV[1] consumer group
-- ARGV[2] consumer
-- ARGV[3] entry id
-- ARGV[4] idle time to set, in milliseconds
-- ARGV[5] the delivery count the caller saw, to take this delivery off it (the attempt failed for a reason
--         outside the order, such as a lock wait or Redis being busy, and must not count against
--         MAX_ATTEMPTS); 0: leave the count. Only that count is lowered: the same call resent after a lost
--         reply finds it lowered already and leaves it.
-- Returns 1 when set, 0 when the entry is no longer pending for ARGV[2].
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #pending == 0 then
  return 0
end
local deliveries = pending[1][4]
if deliveries > 0 and deliveries == tonumber(ARGV[5]) then
  deliveries = deliveries - 1
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[4], 'RETRYCOUNT', deliveries, 'JUSTID')
return 1
