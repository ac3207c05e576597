-- Reset the idle time of a pending stream entry, if the consumer still owns it (XCLAIM to itself).
-- KEYS[1] stream
-- ARGV[1] consumer group
-- ARGV[2] consumer
-- ARGV[3] entry id
-- Returns 1 when reset, 0 when the entry is no longer pending for ARGV[2].
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #pending == 0 then
  return 0
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 1
