-- Publish the outcome events of a round's orders of one partition and ack their entries, for the entries
-- still pending to this consumer only: an entry another consumer claimed meanwhile (this one stalled past
-- the claim idle time) is that consumer's to settle, and its outcome may have been superseded since (a
-- cancel applied), so a stale round publishes nothing that could contradict what was published meanwhile.
-- KEYS[1] the orders partition's stream
-- KEYS[2] its results stream
-- ARGV[1] consumer group
-- ARGV[2] consumer
-- ARGV[3] the results stream's approximate MAXLEN (0: none)
-- ARGV[4] the least and ARGV[5] the greatest of the entry ids; ARGV[6] how many of ARGV[2]'s pending entries
--         between them to look at, at most (the round's and its others, in flight or handed back)
-- ARGV[7..] per order, 4 each: its entry id, then its outcome event's fields in redisstream's format: the
--           message UUID, metadata (msgpack) and payload
-- Returns one integer per order: 1 published and acked, 0 not pending to ARGV[2] (nothing written for it).
-- Every write follows every check, and a Redis out of memory refuses the first one: no entry is acked without
-- its outcome.
local group, consumer, maxlen = ARGV[1], ARGV[2], tonumber(ARGV[3])
local n = (#ARGV - 6) / 4
-- One look at the consumer's pending entries in the round's range of ids.
local mine = {}
for _, p in ipairs(redis.call('XPENDING', KEYS[1], group, ARGV[4], ARGV[5], ARGV[6], consumer)) do
  mine[p[1]] = true
end
local owned, acks = {}, {}
for i = 1, n do
  local a = 4 * i + 3
  if mine[ARGV[a]] then
    if maxlen > 0 then
      redis.call('XADD', KEYS[2], 'MAXLEN', '~', maxlen, '*',
        '_watermill_message_uuid', ARGV[a + 1], 'metadata', ARGV[a + 2], 'payload', ARGV[a + 3])
    else
      redis.call('XADD', KEYS[2], '*', '_watermill_message_uuid', ARGV[a + 1], 'metadata', ARGV[a + 2], 'payload', ARGV[a + 3])
    end
    acks[#acks + 1] = ARGV[a]
    owned[i] = 1
  else
    owned[i] = 0
  end
end
if #acks > 0 then redis.call('XACK', KEYS[1], group, unpack(acks)) end
return owned
