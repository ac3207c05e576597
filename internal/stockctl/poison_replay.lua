-- Replay one poison entry: add its original fields to the orders stream and delete it from the poison
-- stream, in one step, so concurrent replays move each entry at most once.
-- KEYS[1] poison stream
-- KEYS[2] orders stream
-- KEYS[3] <poison stream>:replay-latch:<request id>: the new id once this request replayed the entry, so
--         that a resend after a lost reply (go-redis sends a command again after a lost connection) says
--         replayed, not missing
-- ARGV[1] id of the poison entry
-- ARGV[2] latch lifetime in milliseconds
-- Returns {'replayed', new id in KEYS[2]} | {'missing'} (already replayed, trimmed or never there) |
-- {'refused', reason} (poisoned without its original fields: nothing to replay).
-- The entry added carries replayed_from (the poison entry's id) and replayed_source_id: the id its order
-- was first published as (that of an earlier replay, else poison_source_id), so that a replay of it poisoned
-- again still knows how old its order is (poison_age.go).
local done = redis.call('GET', KEYS[3])
if done then
  return {'replayed', done}
end
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #entries == 0 then
  return {'missing'}
end
local fields, out, payload, source, first = entries[1][2], {}, false, nil, nil
for i = 1, #fields, 2 do
  local name = fields[i]
  if name == 'poison_source_id' then source = fields[i + 1] end
  if name == 'replayed_source_id' then first = fields[i + 1] end
  -- poison_* describe the poisoning; replayed_* are set anew below, once.
  if string.sub(name, 1, 7) ~= 'poison_' and string.sub(name, 1, 9) ~= 'replayed_' then
    out[#out + 1] = name
    out[#out + 1] = fields[i + 1]
    payload = payload or name == 'payload'
  end
end
if not payload then
  return {'refused', 'not replayable: the original entry was not kept'}
end
out[#out + 1] = 'replayed_from'
out[#out + 1] = ARGV[1]
if first or source then
  out[#out + 1] = 'replayed_source_id'
  out[#out + 1] = first or source
end
local id = redis.call('XADD', KEYS[2], '*', unpack(out))
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('SET', KEYS[3], id, 'PX', ARGV[2])
return {'replayed', id}
