-- Trim a stream to its retention, never past an entry that some consumer group has not been delivered yet
-- or still has pending, and report one group's backlog; without that group, trim nothing.
--
-- How old an entry is does not come from its id alone: a producer may XADD an explicit id in the future (the
-- year 2100), and every later entry's id then carries that time too. So each run also notes, in a sorted set
-- (KEYS[2]), the greatest id any group had been delivered and when (Redis's time): entries up to that id were
-- in the stream by then, whatever their ids say. An entry is old once a note that covers it is older than the
-- retention; until there is such a note (the first retention after the stream appeared), its id says. A note
-- is added at most every hundredth of the retention (so the set holds about 100), and the notes older than
-- the one in use are removed: trimming lags the retention by up to a hundredth of it.
-- KEYS[1] stream
-- KEYS[2] its notes of delivered ids (DeliveredTimesKey)
-- ARGV[1] the retention, in milliseconds
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

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local retention = tonumber(ARGV[1])
local cutoff = now - retention
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])

-- The bound: entries before it are older than the retention.
local bound = string.format('%d', cutoff) .. '-0'
local note = redis.call('ZRANGE', KEYS[2], cutoff, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1, 'WITHSCORES')
if #note > 0 then
  bound = after(note[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. note[2])
end
-- A note of the greatest id delivered to a group.
local delivered = '0-0'
for _, g in ipairs(groups) do
  for i = 1, #g, 2 do
    if g[i] == 'last-delivered-id' and less(delivered, g[i + 1]) then delivered = g[i + 1] end
  end
end
local newest = redis.call('ZRANGE', KEYS[2], '+inf', '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1, 'WITHSCORES')
if delivered ~= '0-0' and (#newest == 0 or tonumber(newest[2]) <= now - retention / 100) then
  redis.call('ZADD', KEYS[2], 'NX', now, delivered) -- an id noted before keeps its first time
end
redis.call('PEXPIRE', KEYS[2], 2 * retention)

local minid, holder = bound, ''
local found, pending, lag, oldest = 0, 0, -1, ''
for _, g in ipairs(groups) do
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
-- Without the group (lost in a failover to a replica that never had it, or destroyed), nothing is trimmed:
-- the group, created again by the next read from the replay point, must find the entries it had not decided.
local trimmed = 0
if found == 1 then trimmed = redis.call('XTRIM', KEYS[1], 'MINID', minid) end
return {trimmed, found, pending, lag, oldest, holder}
