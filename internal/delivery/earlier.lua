-- Whether a cancel or fulfil whose order is not known yet should wait for an entry of its partition before
-- its own that is still pending (delivered, not acked): 1 wait, 0 go ahead. It waits at most ARGV[3] ms in
-- all, counted from the first time it asked (Redis's time, noted in KEYS[2] by its entry id), however many
-- times it was handed back and claimed in between, and however old the entry is: an earlier entry that
-- stays pending that long (failing again and again, or waiting behind a lock held elsewhere) no longer holds
-- it back, while a backlog (every entry old, the earlier one being decided now) still does.
-- KEYS[1] the partition's orders stream
-- KEYS[2] the first asks of the events that wait (a hash: entry id -> unix ms), in the stream's slot
-- ARGV[1] consumer group
-- ARGV[2] the event's entry id
-- ARGV[3] the longest wait, ms
-- (The range ends at the event's id, inclusive, and its own entry does not count: Redis before 6.2 and
-- miniredis know no exclusive bound.)
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', ARGV[2], 1)
if #p == 0 or p[1][1] == ARGV[2] then
  redis.call('HDEL', KEYS[2], ARGV[2])
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since = tonumber(redis.call('HGET', KEYS[2], ARGV[2]))
if not since then
  since = now
  redis.call('HSET', KEYS[2], ARGV[2], now)
end
-- The asks of events that stopped asking (their worker died) go with the hash once no event asks.
redis.call('PEXPIRE', KEYS[2], 2 * tonumber(ARGV[3]))
if now - since >= tonumber(ARGV[3]) then
  redis.call('HDEL', KEYS[2], ARGV[2])
  return 0
end
return 1
