-- Hand a consumer its next entries (XREADGROUP ... >) or the idle entries it claims (XAUTOCLAIM), with each
-- entry's delivery count, and never an oversized entry: that one is poisoned here, inside Redis, as its id,
-- size, field names and a prefix of its payload, then acked and deleted, so no worker ever has to hold it.
--
-- Exact under a resend: a call whose reply was lost (go-redis sends it again on a new connection, or the
-- subscriber calls again with the same request id) hands over the same entries again, those still pending to
-- the consumer, with their delivery counts as they are, rather than reading or claiming the next ones and
-- leaving these pending, unseen, until a claim: a lost reply costs no delivery, so it never counts towards
-- MAX_ATTEMPTS. The call notes what it handed over in KEYS[3] (request id, cursor, ids, deleted ids), for
-- ARGV[10] milliseconds (at most half the claim idle time); an empty read or claim notes nothing.
-- KEYS[1] stream
-- KEYS[2] poison stream
-- KEYS[3] what the consumer's last call of this mode handed over (FetchedKey)
-- ARGV[1] read | claim
-- ARGV[2] consumer group
-- ARGV[3] consumer
-- ARGV[4] largest entry accepted, in bytes (field names and values)
-- ARGV[5] approximate MAXLEN of the poison stream
-- ARGV[6] how many entries at most
-- ARGV[7] claim: the minimum idle time in milliseconds (a read: ignored)
-- ARGV[8] claim: the cursor (the id the scan of the pending entries goes on from; 0-0 at first); with
--         ARGV[11], the cursor of the next scan, handed back as it is
-- ARGV[9] the call's request id, the same when it is sent again
-- ARGV[10] how long KEYS[3] is kept, in milliseconds (an entry is handed over again only while pending to ARGV[3])
-- ARGV[11] optional, claim: the only entries to claim (those the subscriber chose), their ids comma-separated,
--         each claimed only while idle for ARGV[7]
-- Returns {entries, poisoned, cursor, deleted, resent}: entries = the entries as one msgpack string (cmsgpack), an
-- array of {id, {field, value, ...}} (delivered once: a read) or {id, {field, value, ...}, deliveries};
-- poisoned = {{id, bytes}, ...}; claim: the next cursor (0-0: the scan is complete) and the ids of the
-- pending entries found deleted from the stream (XAUTOCLAIM drops them from the pending list); resent = 1
-- when this is a call made before, whose entries are handed over again. (One string:
-- turning 100 entries into a reply of some 900 values cost the worker reading it two dozen allocations an
-- entry; packing them costs Redis no more.) A server without cmsgpack (miniredis, which the embedded demo
-- runs) hands the same array over as a reply of its own.
-- Errors: NOGROUP when the group (or the stream) is missing.
local stream, poison = KEYS[1], KEYS[2]
local mode, group, consumer = ARGV[1], ARGV[2], ARGV[3]
local limit, count = tonumber(ARGV[4]), tonumber(ARGV[6])

local function size(fields)
  local n = 0
  for i = 1, #fields do n = n + #fields[i] end
  return n
end

local function poisonEntry(id, fields, bytes)
  local names, payload = {}, ''
  for i = 1, #fields, 2 do
    names[#names + 1] = fields[i]
    if fields[i] == 'payload' then payload = fields[i + 1] end
  end
  redis.call('XADD', poison, 'MAXLEN', '~', ARGV[5], '*',
    'poison_reason', string.format('entry of %d bytes is over the %d byte limit', bytes, limit),
    'poison_source_stream', stream, 'poison_source_id', id, 'poison_entry_bytes', bytes,
    'poison_field_names', string.sub(table.concat(names, ','), 1, 1024),
    'poison_prefix', string.sub(payload, 1, 256))
  redis.call('XACK', stream, group, id)
  redis.call('XDEL', stream, id)
end

-- pack is how the entries are handed over: packed when the server can (rawget: a global the server lacks
-- is an error otherwise).
local msgpack = rawget(_G, 'cmsgpack')
local function pack(list)
  if msgpack then return msgpack.pack(list) end
  return list
end

local entries, poisoned = {}, {}
-- keep poisons an oversized entry, and keeps any other with its delivery count.
local function keep(id, fields, deliveries)
  local bytes = size(fields)
  if bytes > limit then
    poisonEntry(id, fields, bytes)
    poisoned[#poisoned + 1] = {id, bytes}
    return
  end
  entries[#entries + 1] = {id, fields, deliveries}
end

-- A call made before: its entries again, those still pending to the consumer.
local last = redis.call('GET', KEYS[3])
if last then
  local req, cursor, ids, deleted = string.match(last, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  if req == ARGV[9] then
    for id in string.gmatch(ids, '[^,]+') do
      local p = redis.call('XPENDING', stream, group, id, id, 1, consumer)
      local e = #p > 0 and redis.call('XRANGE', stream, id, id)
      if e and #e > 0 then entries[#entries + 1] = {id, e[1][2], p[1][4]} end
    end
    local gone = {}
    for id in string.gmatch(deleted, '[^,]+') do gone[#gone + 1] = id end
    return {pack(entries), poisoned, cursor, gone, 1}
  end
end

-- note keeps what this call hands over, for a call of the same request id.
local function note(list, cursor, deleted)
  if #list == 0 and #deleted == 0 then return end
  local ids = {}
  for i, e in ipairs(list) do ids[i] = e[1] end
  redis.call('SET', KEYS[3], ARGV[9] .. '|' .. cursor .. '|' .. table.concat(ids, ',') .. '|' .. table.concat(deleted, ','),
    'PX', ARGV[10])
end

if mode == 'read' then
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, 'STREAMS', stream, '>')
  if not r then return {pack({}), poisoned, '0-0', {}, 0} end
  local read = r[1][2] -- {{id, {field, value, ...}}, ...}: handed over as it is when none is oversized
  for _, e in ipairs(read) do
    if size(e[2]) > limit then
      for _, e in ipairs(read) do keep(e[1], e[2], 1) end
      note(entries, '0-0', {})
      return {pack(entries), poisoned, '0-0', {}, 0}
    end
  end
  note(read, '0-0', {})
  return {pack(read), poisoned, '0-0', {}, 0}
end

if ARGV[11] then
  local deleted = {}
  for id in string.gmatch(ARGV[11], '[^,]+') do
    -- Acked since it was chosen (poisoned by another owner's claim, say): not pending, nothing to claim or report.
    if #redis.call('XPENDING', stream, group, id, id, 1) > 0 then
      local e = redis.call('XCLAIM', stream, group, consumer, ARGV[7], id)[1]
      if e and e[2] then
        local p = redis.call('XPENDING', stream, group, id, id, 1)
        keep(id, e[2], p[1][4])
      elseif #redis.call('XRANGE', stream, id, id) == 0 and #redis.call('XPENDING', stream, group, id, id, 1) == 0 then
        deleted[#deleted + 1] = id -- deleted while pending: XCLAIM dropped it from the pending list
      end -- else another consumer claimed it since it was chosen
    end
  end
  note(entries, ARGV[8], deleted)
  return {pack(entries), poisoned, ARGV[8], deleted, 0}
end

local r = redis.call('XAUTOCLAIM', stream, group, consumer, ARGV[7], ARGV[8], 'COUNT', count)
for _, e in ipairs(r[2]) do
  if e and e[2] then -- Redis 6.2 lists an entry deleted while pending with no fields (7.0 in r[3])
    local p = redis.call('XPENDING', stream, group, e[1], e[1], 1)
    keep(e[1], e[2], p[1][4])
  end
end
note(entries, r[1], r[3] or {})
return {pack(entries), poisoned, r[1], r[3] or {}, 0}
