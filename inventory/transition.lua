-- Move the lines of a reserved order on, each at most once: cancel (the stock goes back to available),
-- fulfil (it leaves reserved for good) or abort (a basket's reservation undone because another of its
-- lines was rejected: the line becomes rejected, other_line_rejected, and its stock goes back).
-- Per line i (i = 1..n), k keys each (k = #KEYS / n, 2 or 3), as in reserve_lines.lua:
-- KEYS[k*(i-1)+1]  stock:{SKU}; KEYS[k*(i-1)+2] order:{SKU}:<order_id>; KEYS[k*(i-1)+3] fencing counter
-- ARGV[1]          cancel | fulfil | abort
-- ARGV[2]          1: a call that changes nothing rewrites the first record as it is (WithReplicaAcks)
-- ARGV[3]          outcome TTL in milliseconds: every record a transition writes lives this long from now
-- ARGV[3*i+1]      quantity of line i; ARGV[3*i+2] its fencing token (0 = unfenced); ARGV[3*i+3] the
--                  members a record written anew carries (,"lines":[...] or ,"anchor":"..."); a record
--                  that exists keeps its own
-- A line already in the target state is replayed. A cancel also writes a cancelled record for a line that
-- has none (a basket whose line-by-line reservation a crash interrupted: its redelivery then replays
-- the cancellation instead of reserving the line), and an abort a rejected one (the lines of a saga after
-- the one that rejected the basket: a cancel naming one of them then finds the order rejected).
-- Returns one {replayed (0|1), status, reason, quantity, available_after, fence} per line, in order.
-- Errors: CONFLICT <line> <status> (a line in a state the operation cannot leave), STALEFENCE <stored
-- fence>, STALETOKEN <current token>, UNKNOWNSKU, CORRUPT <field>. Every check runs before the first
-- write, so an error leaves Redis untouched.

local op = ARGV[1]
local target = ({cancel = 'cancelled', fulfil = 'fulfilled', abort = 'rejected'})[op]
local n = (#ARGV - 3) / 3
local k = #KEYS / n

local lines, writes = {}, false
for i = 1, n do
  local base, a = k * (i - 1), 3 * i + 1
  local l = {stock = KEYS[base + 1], record = KEYS[base + 2], quantity = tonumber(ARGV[a]),
    token = tonumber(ARGV[a + 1]), extra = ARGV[a + 2]}
  l.raw = redis.call('GET', l.record)
  local status = 'none'
  if l.raw and cjson.decode(l.raw).early then
    -- A cancel that came before the order (cancel_early.lua): its line counts as never reserved, and a
    -- cancel writes its record anew, as the order's. Anything else finds it cancelled.
    if op == 'cancel' then l.raw = nil else status = 'cancelled' end
  end
  if l.raw and status == 'none' then
    l.o = cjson.decode(l.raw)
    -- A record keeps the members it was written with (a single-SKU order's none, a basket line's lines or
    -- anchor): whose order it is does not change.
    l.extra = string.match(l.raw, '"fence":%-?%d+(.*)}$') or ''
    status, l.quantity = l.o.status, l.o.quantity
    if status == 'released' then status = 'cancelled' end -- Release's word for it
  end
  if status == target and (op ~= 'abort' or l.o.reason == 'other_line_rejected') then
    l.replay = true
  elseif status == 'reserved' or (op ~= 'fulfil' and status == 'none') then
    local st = redis.call('HMGET', l.stock, 'available', 'reserved', 'fence', 'fulfilled')
    l.fence = tonumber(st[3])
    local err = stale(l.token, st[3], k == 3 and KEYS[base + 3] or nil)
    if err then return redis.error_reply(err) end
    if status == 'reserved' and not st[1] then return redis.error_reply('UNKNOWNSKU') end
    for f, v in pairs({available = st[1], reserved = st[2], fulfilled = st[4]}) do
      if v and not int(v) then return redis.error_reply('CORRUPT ' .. f) end
    end
    l.from, l.available, l.known = status, tonumber(st[1]) or 0, st[1] ~= nil
    writes = true
  else
    return redis.error_reply('CONFLICT ' .. i .. ' ' .. status)
  end
  lines[i] = l
end

local replies = {}
for i, l in ipairs(lines) do
  if l.replay then
    replies[i] = {1, l.o.status, l.o.reason, l.o.quantity, l.o.available_after, l.o.fence}
  else
    local after, reason = l.available, ''
    if l.from == 'reserved' and op == 'fulfil' then
      redis.call('HINCRBY', l.stock, 'reserved', -l.quantity)
      redis.call('HINCRBY', l.stock, 'fulfilled', l.quantity)
    elseif l.from == 'reserved' then
      after = redis.call('HINCRBY', l.stock, 'available', l.quantity)
      redis.call('HINCRBY', l.stock, 'reserved', -l.quantity)
    end
    if op == 'abort' then reason = 'other_line_rejected' end
    if l.known and l.token > (l.fence or 0) then redis.call('HSET', l.stock, 'fence', l.token) end
    local record = string.format(
      '{"status":"%s","reason":"%s","quantity":%d,"available_after":%d,"fence":%d%s}',
      target, reason, l.quantity, after, l.token, l.extra)
    -- A full TTL from now, also for a record that had one already: the event that moved the line on must
    -- find its record on every redelivery for as long as a reservation would.
    redis.call('SET', l.record, record, 'PX', ARGV[3])
    replies[i] = {0, target, reason, l.quantity, after, l.token}
  end
end
if not writes and ARGV[2] == '1' then redis.call('SET', lines[1].record, lines[1].raw, 'KEEPTTL') end
return replies
