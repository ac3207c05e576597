-- The helpers the stock scripts share (stockScript, in inventory.go, puts this file in front of each script
-- that uses them: reserve, release, reserve_batch, reserve_lines, transition, restock). Redis scripts cannot
-- call each other, so the package writes the helpers once and sends them with each script.

-- A stock field HINCRBY takes: an integer as Redis writes it (no leading zero, no -0), far from the int64
-- limits. A field that passed this check cannot fail the script's increments halfway.
local function int(v)
  return (v == '0' or string.find(v, '^%-?[1-9]%d*$') ~= nil) and #v <= 20 and math.abs(tonumber(v)) < 4e18
end

-- Whether record o was written for the order of this call, whose record members are extra (ARGV): the
-- line of a basket has the same anchor, or on the basket's first SKU lines of the same SKUs; a single-SKU
-- order (no members) has neither. An order id reused for another order must not replay its records.
local function same(o, extra)
  if o.early then return true end -- a cancel that came first (cancel_early.lua): any order of the id
  local want = {}
  if extra and extra ~= '' then want = cjson.decode('{' .. string.sub(extra, 2) .. '}') end
  if want.anchor or o.anchor then return want.anchor == o.anchor end
  if not want.lines or not o.lines then return want.lines == nil and o.lines == nil end
  if #want.lines ~= #o.lines then return false end
  for i, l in ipairs(want.lines) do
    if o.lines[i].sku ~= l.sku then return false end
  end
  return true
end

-- The fence check of a write under token (0: unfenced) to a stock whose fence field is stored (nil: none),
-- with the lock's fencing counter at key counter (nil: not kept with the stock): 'STALEFENCE <fence>' when
-- a later holder wrote, 'STALETOKEN <counter>' when a later holder has the lock, nil when the write may go.
local function stale(token, stored, counter)
  if token <= 0 then return nil end
  local fence = tonumber(stored)
  if fence and token < fence then return 'STALEFENCE ' .. stored end
  if counter then
    local current = tonumber(redis.call('GET', counter) or '')
    if current and token < current then return 'STALETOKEN ' .. current end
  end
  return nil
end

