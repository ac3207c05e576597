-- Reserve stock for a batch of orders of one SKU, each at most once: the outcomes, records and stock that
-- reserve.lua gives called for each order in turn with the same token, in one call that writes the stock
-- hash once. The decisions are reserve.lua's (the batch tests compare the two).
-- KEYS[1]           stock:{SKU}  hash: available, reserved, fence, elided (the mark of elided, below)
-- KEYS[2]           optional: the lock's fencing counter (same slot), as in reserve.lua; present when
--                   #KEYS is n + 2 or more
-- KEYS[3]           with ARGV[1] = -1 only: the lock (lock:{SKU}, Redisson's layout), #KEYS is n + 3
-- KEYS[#KEYS-n+i]   order:{SKU}:<order_id> of order i (i = 1..n): the outcome recorded for it (JSON)
-- ARGV[1]           fencing token, 0 = unfenced; -1: the call takes the lock itself (lock elision): if
--                   KEYS[3] is held it fails with LOCKED and writes nothing, else it decides under a token
--                   above every token the counter issued (elided, below), the lock held for the duration of
--                   the call as if acquired and released around it
-- ARGV[2]           outcome TTL in milliseconds
-- ARGV[3]           1: a batch that writes nothing (all its orders replayed) rewrites its first record as
--                   it is, as a replay does in reserve.lua (WithReplicaAcks)
-- ARGV[4]           with ARGV[1] = -1: the fencing counter's TTL in milliseconds (0: none), as the lock's
--                   acquisitions set it, for a counter the call creates (elided)
-- ARGV[4+i]         quantity of order i, 1..MaxQuantity; n = #ARGV - 4
-- Returns one line per order, in order, joined by "\n": "0" or "1" (replayed), then the order's outcome
-- record as stored: {"status":"..","reason":"..","quantity":N,"available_after":N,"fence":N}. (One
-- string: turning a table per order into a reply cost Redis, and the worker reading it, more.)
-- Errors: STALEFENCE <stored fence>, STALETOKEN <current token>, CORRUPT <field>, LOCKED, IDCONFLICT <i>
-- (order i's id has a basket's record). The checks run once,
-- before the first write, so an error leaves Redis untouched. As in reserve.lua a recorded order is
-- replayed unchecked: a batch whose orders all have a recorded outcome is not checked.

local token, n = tonumber(ARGV[1]), #ARGV - 4
local first = #KEYS - n -- KEYS[first + i] is the record of order i
local elide = token < 0
if elide and redis.call('EXISTS', KEYS[3]) == 1 then return redis.error_reply('LOCKED') end

-- reserve.lua's checks; returns the error, or nil.
local function check(stock)
  local err = stale(token, stock[3], first >= 2 and KEYS[2] or nil)
  if err then return err end
  if not stock[1] then return nil end
  if not int(stock[1]) then return 'CORRUPT available' end
  if stock[2] and not int(stock[2]) then return 'CORRUPT reserved' end
end

-- elided is the token of a batch that takes the lock itself, and the mark its fence write leaves (nil: no
-- write): above every token that wrote and every token the counter issued, so that a holder whose lease
-- ran out is refused (STALEFENCE) once the batch ran: max(fence, counter) + 1, the fence raised to it and
-- marked "<fence>:<counter>" (stock field elided). A fence so marked, with the counter still at its mark,
-- was raised by an elided batch and nothing since (no acquisition, no other write, the counter not lost):
-- it is kept, and nothing is written. The counter is written only when there is none (a SKU never
-- locked, a counter lost: created at the token's - 1 with ARGV[4]'s TTL) or it is behind the fence (raised
-- to the token's - 1), so that the next acquisition draws the fence, which a fence takes (it refuses only
-- lower tokens), rather than a token below it. A counter rolled back (a failover that lost an INCR) can
-- hand out again the token at the fence: fencing never covered tokens lost with their counter.
local function elided(stock, counter)
  local fence, issued = tonumber(stock[3]) or 0, redis.call('GET', counter)
  if issued and stock[4] == string.format('%d:%s', fence, issued) then return fence, nil end
  local token = math.max(fence, tonumber(issued or '0')) + 1
  if not issued then
    issued = string.format('%d', token - 1)
    if tonumber(ARGV[4]) > 0 then
      redis.call('SET', counter, issued, 'PX', ARGV[4])
    else
      redis.call('SET', counter, issued)
    end
  elseif tonumber(issued) < token - 1 then -- behind the fence: raised, as RaiseToken would after a refusal
    issued = string.format('%d', token - 1)
    redis.call('SET', counter, issued, 'KEEPTTL')
  end
  return token, string.format('%d:%s', token, issued)
end

local records, undecided, mark = {}, false, nil
for i = 1, n do
  records[i] = redis.call('GET', KEYS[first + i])
  undecided = undecided or not records[i]
  -- A basket's line (lines.go) is another order's, as in reserve.lua.
  if records[i] and (string.find(records[i], '"lines":', 1, true) or string.find(records[i], '"anchor":', 1, true)) then
    return redis.error_reply('IDCONFLICT ' .. i)
  end
end
local stock = {}
if undecided then
  stock = redis.call('HMGET', KEYS[1], 'available', 'reserved', 'fence', 'elided')
  local err = check(stock)
  if err then return redis.error_reply(err) end
  if elide then token, mark = elided(stock, KEYS[2]) end
end

-- Decide in memory first; the writes follow, the stock first, so that HINCRBY refusing a value (as in
-- reserve.lua, its first write) leaves Redis untouched.
local available, taken = tonumber(stock[1]), 0 -- available: nil for an unknown SKU
-- decide returns the record of an order of quantity (reserve.lua's, field for field).
local function decide(quantity)
  local status, reason, after = 'reserved', '', 0
  if not available then
    status, reason = 'rejected', 'unknown_sku'
  elseif available < quantity then
    status, reason, after = 'rejected', 'insufficient_stock', available
  else
    available, taken = available - quantity, taken + quantity
    after = available
  end
  return string.format('{"status":"%s","reason":"%s","quantity":%d,"available_after":%d,"fence":%d}',
    status, reason, quantity, after, token)
end

-- reply holds, per order, its replayed mark, its record and a line break.
local reply, decided, fresh = {}, {}, {}
for i = 1, n do
  local key, record, replayed = KEYS[first + i], records[i], '1'
  if record then
    cjson.decode(record) -- a record that is not JSON fails the batch here, before any write
  elseif decided[key] then
    record = decided[key] -- the order id came earlier in this batch: replay the decision just made
  else
    record, replayed = decide(tonumber(ARGV[4 + i])), '0'
    decided[key], fresh[#fresh + 1] = record, i
  end
  reply[3 * i - 2], reply[3 * i - 1], reply[3 * i] = replayed, record, '\n'
end

if taken > 0 then
  redis.call('HINCRBY', KEYS[1], 'available', -taken)
  redis.call('HINCRBY', KEYS[1], 'reserved', taken)
end
-- Raise only, once, and as in reserve.lua never on an unknown SKU; an elided batch leaves its mark, any
-- other write none (an old mark no longer matches the fence).
if stock[1] and token > (tonumber(stock[3]) or 0) then
  if mark then
    redis.call('HSET', KEYS[1], 'fence', string.format('%d', token), 'elided', mark)
  else
    redis.call('HSET', KEYS[1], 'fence', string.format('%d', token))
  end
end
if #fresh == 0 and ARGV[3] == '1' then
  redis.call('SET', KEYS[first + 1], records[1], 'KEEPTTL')
end
for _, i in ipairs(fresh) do
  redis.call('SET', KEYS[first + i], reply[3 * i - 1], 'PX', ARGV[2])
end
reply[3 * n] = nil -- no line break after the last
return table.concat(reply)
