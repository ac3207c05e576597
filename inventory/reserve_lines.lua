-- Reserve every line of a basket or none, at most once, on one Redis (the keys of its SKUs may be in
-- different Cluster slots: lines.go runs the basket line by line on a cluster instead).
-- Per line i (i = 1..n), k keys each (k = #KEYS / n, 2, 3 or 4):
-- KEYS[k*(i-1)+1]  stock:{SKU}             hash: available, reserved, fence, elided (reserve_batch.lua)
-- KEYS[k*(i-1)+2]  order:{SKU}:<order_id>  string: the outcome recorded for the line (JSON)
-- KEYS[k*(i-1)+3]  with k >= 3: the lock's fencing counter of the SKU, as in reserve.lua
-- KEYS[k*(i-1)+4]  with k = 4 (lock elision, every token -1): the SKU's lock (lock:{SKU}, Redisson's layout)
-- ARGV[1]          outcome TTL in milliseconds
-- ARGV[2]          1: a replay rewrites the first record as it is, as in reserve.lua (WithReplicaAcks)
-- ARGV[3]          with k = 4: the fencing counters' TTL in milliseconds (0: none), as in reserve_batch.lua
-- ARGV[3*i+1]      quantity of line i; ARGV[3*i+2] its fencing token (0 = unfenced; -1 with k = 4: the
--                  call takes the line's lock itself, as reserve_batch.lua does: if any line's lock is held
--                  it fails with LOCKED and writes nothing, else each line is decided under the token
--                  reserve_batch.lua's elided gives it, the locks held for the duration of the call as if
--                  acquired and released around it);
--                  ARGV[3*i+3] the members its record adds (,"lines":[...] or ,"anchor":"..."; lines.go)
-- Returns one {replayed (0|1), status, reason, quantity, available_after, fence} per line, in order.
-- Errors: LOCKED, PARTIAL (some lines have a record, some not: a basket begun line by line; lines.go finishes it
-- that way), IDCONFLICT <line> (the line's record is another order's: the order id was reused),
-- EARLYCANCEL <line> (a cancel of the order came first: lines.go cancels the basket whole), STALEFENCE <stored fence>, STALETOKEN <current token>, CORRUPT <field>. Every check runs
-- before the first write, so an error leaves Redis untouched.

local n = (#ARGV - 3) / 3
local k = #KEYS / n
local elide = k == 4
if elide then
  for i = 1, n do
    if redis.call('EXISTS', KEYS[k * i]) == 1 then return redis.error_reply('LOCKED') end
  end
end

local records, have = {}, 0
for i = 1, n do
  local raw = redis.call('GET', KEYS[k * (i - 1) + 2])
  if raw then
    records[i], have = cjson.decode(raw), have + 1
    if not same(records[i], ARGV[3 * i + 3]) then return redis.error_reply('IDCONFLICT ' .. i) end
    if records[i].early then return redis.error_reply('EARLYCANCEL ' .. i) end
    if i == 1 then records.raw = raw end
  end
end
if have == n then
  -- Redelivery: the first decision stands.
  local replies = {}
  for i = 1, n do
    local o = records[i]
    replies[i] = {1, o.status, o.reason, o.quantity, o.available_after, o.fence}
  end
  if ARGV[2] == '1' then redis.call('SET', KEYS[2], records.raw, 'KEEPTTL') end
  return replies
end
if have > 0 then return redis.error_reply('PARTIAL ' .. have .. ' of ' .. n) end

-- Check every line, as reserve.lua does, before deciding.
local lines, short = {}, false
for i = 1, n do
  local base, a = k * (i - 1), 3 * i + 1
  local l = {stock = KEYS[base + 1], record = KEYS[base + 2], quantity = tonumber(ARGV[a]),
    token = tonumber(ARGV[a + 1]), extra = ARGV[a + 2]}
  local st = redis.call('HMGET', l.stock, 'available', 'reserved', 'fence', 'elided')
  l.fence, l.elided = tonumber(st[3]), st[4]
  local err = stale(l.token, st[3], k == 3 and KEYS[base + 3] or nil)
  if err then return redis.error_reply(err) end
  if st[1] then
    if not int(st[1]) then return redis.error_reply('CORRUPT available') end
    if st[2] and not int(st[2]) then return redis.error_reply('CORRUPT reserved') end
    l.available = tonumber(st[1])
  end
  if not l.available then
    l.reason, l.after = 'unknown_sku', 0
  elseif l.available < l.quantity then
    l.reason, l.after = 'insufficient_stock', l.available
  end
  short = short or l.reason ~= nil
  lines[i] = l
end

if elide then
  -- Checked, so the writes may start: each line's token as in reserve_batch.lua's elided.
  for i, l in ipairs(lines) do
    local counter = KEYS[k * (i - 1) + 3]
    local fence, issued = l.fence or 0, redis.call('GET', counter)
    if issued and l.elided == string.format('%d:%s', fence, issued) then
      l.token = fence
    else
      l.token = math.max(fence, tonumber(issued or '0')) + 1
      if not issued then
        issued = string.format('%d', l.token - 1)
        if tonumber(ARGV[3]) > 0 then
          redis.call('SET', counter, issued, 'PX', ARGV[3])
        else
          redis.call('SET', counter, issued)
        end
      elseif tonumber(issued) < l.token - 1 then
        issued = string.format('%d', l.token - 1)
        redis.call('SET', counter, issued, 'KEEPTTL')
      end
      l.mark = string.format('%d:%s', l.token, issued)
    end
  end
end

local replies = {}
for i, l in ipairs(lines) do
  local status, reason, after = 'reserved', '', 0
  if short then
    status, reason, after = 'rejected', l.reason or 'other_line_rejected', l.after or l.available
  else
    after = redis.call('HINCRBY', l.stock, 'available', -l.quantity)
    redis.call('HINCRBY', l.stock, 'reserved', l.quantity)
  end
  -- Raise only, and never on an unknown SKU, as in reserve.lua; an elided line leaves its mark.
  if l.available and l.token > (l.fence or 0) then
    if l.mark then
      redis.call('HSET', l.stock, 'fence', string.format('%d', l.token), 'elided', l.mark)
    else
      redis.call('HSET', l.stock, 'fence', string.format('%d', l.token))
    end
  end
  redis.call('SET', l.record, string.format(
    '{"status":"%s","reason":"%s","quantity":%d,"available_after":%d,"fence":%d%s}',
    status, reason, l.quantity, after, l.token, l.extra), 'PX', ARGV[1])
  replies[i] = {0, status, reason, l.quantity, after, l.token}
end
return replies
