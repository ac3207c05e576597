-- Publish the answers to entries of one stream (Publisher, Answer: the worker's outcome events of a round's
-- orders of one partition), for the entries still pending to this consumer only: an entry another consumer
-- claimed meanwhile (this one stalled past the claim idle time) is that consumer's to settle, and its answer
-- may have been superseded since (a cancel applied), so a stale round publishes nothing that could
-- contradict what was published meanwhile. The entries are acked later, by the router's ack of each message
-- (the subscriber's batched XACK), once its answer is here.
-- Safe to send twice: the call notes its request id and reply in KEYS[3] for a minute, and a call made again
-- (go-redis resends after a lost reply) returns that reply and writes no answer (it sets the note's expiry again).
-- KEYS[1] the answered stream (an orders partition's)
-- KEYS[2] the stream of the answers (its results stream)
-- KEYS[3] the consumer's last call on KEYS[1] (CommittedKey)
-- ARGV[1] consumer group
-- ARGV[2] consumer
-- ARGV[3] the results stream's approximate MAXLEN (0: none)
-- ARGV[4] the least and ARGV[5] the greatest of the entry ids; ARGV[6] how many of ARGV[2]'s pending entries
--         between them to look at, at most (the round's and its others, in flight or handed back)
-- ARGV[7] the call's request id
-- ARGV[8..] per answer, 4 each: the entry id it answers, then its fields in redisstream's format: the
--           message UUID, metadata (msgpack) and payload
-- Returns one integer per answer: 1 published, 0 not pending to ARGV[2] (nothing written for it).
-- Every write follows every check, and a Redis out of memory refuses the first one.
local group, consumer, maxlen = ARGV[1], ARGV[2], tonumber(ARGV[3])
local n = (#ARGV - 7) / 4
local last = redis.call('GET', KEYS[3])
if last and string.sub(last, 1, #ARGV[7] + 1) == ARGV[7] .. '|' then
  local owned = {}
  for i = 1, n do owned[i] = tonumber(string.sub(last, #ARGV[7] + 1 + i, #ARGV[7] + 1 + i)) end
  -- Its expiry set again, so that this call writes (PEXPIRE, which a Redis out of memory still runs): a WAIT
  -- after it on its connection (PublisherConfig.ReplicaAcks) then waits for the answers the first send wrote,
  -- where Redis counts a connection's own writes only.
  redis.call('PEXPIRE', KEYS[3], 60000)
  return owned
end
-- One look at the consumer's pending entries in the round's range of ids.
local mine = {}
for _, p in ipairs(redis.call('XPENDING', KEYS[1], group, ARGV[4], ARGV[5], ARGV[6], consumer)) do
  mine[p[1]] = true
end
local owned = {}
for i = 1, n do
  local a = 4 * i + 4
  if mine[ARGV[a]] then
    redis.call('XADD', KEYS[2], '*', '_watermill_message_uuid', ARGV[a + 1], 'metadata', ARGV[a + 2], 'payload', ARGV[a + 3])
    owned[i] = 1
  else
    owned[i] = 0
  end
end
-- Trimmed once for the call, not per XADD (three arguments fewer an event; the same approximate bound,
-- and no client sees the stream between the two).
if maxlen > 0 then
  redis.call('XTRIM', KEYS[2], 'MAXLEN', '~', maxlen)
end
redis.call('SET', KEYS[3], ARGV[7] .. '|' .. table.concat(owned), 'PX', 60000)
return owned
