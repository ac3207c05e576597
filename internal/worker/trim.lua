-- Trim a stream to its retention, never past an entry that some consumer group has not been delivered yet
-- or still has pending, and report one group's backlog.
-- KEYS[1] stream
-- ARGV[1] trim entries older than this id ("<unix ms>-0": now - retention)
-- ARGV[2] the consumer group to report on
-- Returns {trimmed, group found (0|1), pending, lag (-1: unknown), oldest pending id or ''}.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, 0, 0, -1, ''}
end

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function less(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end

local function after(id)
  local ms, seq = parse(id)
  return string.format('%d-%d', ms, seq + 1)
end

local minid = ARGV[1]
local found, pending, lag, oldest = 0, 0, -1, ''
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  -- Entries after last-delivered-id have not reached this group yet.
  local next = after(info['last-delivered-id'])
  if less(next, minid) then minid = next end
  local summary = redis.call('XPENDING', KEYS[1], info['name'])
  if summary[1] > 0 and less(summary[2], minid) then minid = summary[2] end
  if info['name'] == ARGV[2] then
    found, pending = 1, summary[1]
    if info['lag'] then lag = info['lag'] end
    if summary[1] > 0 then oldest = summary[2] end
  end
end
return {redis.call('XTRIM', KEYS[1], 'MINID', minid), found, pending, lag, oldest}
