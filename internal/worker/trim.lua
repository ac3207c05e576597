-- Trim a stream to its retention, never past an entry that some consumer group has not been delivered yet
-- or still has pending, and report one group's backlog.
-- KEYS[1] stream
-- ARGV[1] trim entries older than this id ("<unix ms>-0": now - retention)
-- ARGV[2] the consumer group to report on
-- Returns {trimmed, group found (0|1), pending, lag (-1: unknown), oldest pending id or '', holder}, where
-- holder names a group that keeps entries older than the retention ('' when none does).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, 0, 0, -1, '', ''}
end

-- Stream ids are compared as strings of digits (shorter is smaller), never as Lua numbers: a sequence
-- number can exceed what a double holds exactly.
local function parts(id)
  return string.match(id, '^(%d+)-(%d+)$')
end
local function lessDigits(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local function less(a, b)
  local am, as = parts(a)
  local bm, bs = parts(b)
  if am ~= bm then return lessDigits(am, bm) end
  return lessDigits(as, bs)
end
-- after returns the id right after id, or id itself when its sequence is too large to add to exactly
-- (then one entry more is kept).
local function after(id)
  local ms, seq = parts(id)
  if #seq > 15 then return id end
  return ms .. '-' .. string.format('%d', tonumber(seq) + 1)
end

local bound = ARGV[1]
local minid, holder = bound, ''
local found, pending, lag, oldest = 0, 0, -1, ''
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  -- Entries after last-delivered-id have not reached this group yet.
  local keep = after(info['last-delivered-id'])
  local summary = redis.call('XPENDING', KEYS[1], info['name'])
  if summary[1] > 0 and less(summary[2], keep) then keep = summary[2] end
  if less(keep, minid) then minid = keep end
  if less(keep, bound) then holder = info['name'] end
  if info['name'] == ARGV[2] then
    found, pending = 1, summary[1]
    if info['lag'] then lag = info['lag'] end
    if summary[1] > 0 then oldest = summary[2] end
  end
end
return {redis.call('XTRIM', KEYS[1], 'MINID', minid), found, pending, lag, oldest, holder}
