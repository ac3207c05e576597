-- Hand a consumer its next entry (XREADGROUP ... >) or the idle entries it claims (XCLAIM), with each
-- entry's delivery count, and never an oversized entry: that one is poisoned here, inside Redis, as its id,
-- size, field names and a prefix of its payload, then acked and deleted, so no worker ever has to hold it.
-- KEYS[1] stream
-- KEYS[2] poison stream
-- ARGV[1] read | claim
-- ARGV[2] consumer group
-- ARGV[3] consumer
-- ARGV[4] largest entry accepted, in bytes (field names and values)
-- ARGV[5] approximate MAXLEN of the poison stream
-- ARGV[6..] claim: the minimum idle time in milliseconds, then the ids to claim
-- Returns {entries, poisoned}: entries = {{id, deliveries, {field, value, ...}}, ...},
-- poisoned = {{id, bytes}, ...}. Errors: NOGROUP when the group (or the stream) is missing.
local stream, poison = KEYS[1], KEYS[2]
local mode, group, consumer = ARGV[1], ARGV[2], ARGV[3]
local limit = tonumber(ARGV[4])

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

local entries, poisoned = {}, {}
-- keep checks one entry: poisons it if oversized, else returns it with its delivery count.
local function keep(id, fields, deliveries)
  local bytes = size(fields)
  if bytes > limit then
    poisonEntry(id, fields, bytes)
    poisoned[#poisoned + 1] = {id, bytes}
    return false
  end
  entries[#entries + 1] = {id, deliveries, fields}
  return true
end

if mode == 'read' then
  -- A few oversized entries in a row are poisoned in one call; then the next call goes on.
  for _ = 1, 8 do
    local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', 1, 'STREAMS', stream, '>')
    if not r then break end
    local e = r[1][2][1]
    if keep(e[1], e[2], 1) then break end
  end
else
  local claimed = redis.call('XCLAIM', stream, group, consumer, unpack(ARGV, 6))
  for _, e in ipairs(claimed) do
    if e and e[2] then -- an entry deleted while pending has no fields
      local p = redis.call('XPENDING', stream, group, e[1], e[1], 1)
      keep(e[1], e[2], p[1][4])
    end
  end
end
return {entries, poisoned}
