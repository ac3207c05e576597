-- Acquire a reentrant lock in the Redisson RLock layout, with a fencing token as in Redisson's RFencedLock.
-- KEYS[1] lock hash (field = owner id, value = reentry count)
-- KEYS[2] fencing counter
-- KEYS[3] request latch: written by a reentry only (count:token), so that a resend of it (go-redis sends a
--         command again after a lost connection) answers the same instead of counting a second hold; left
--         'undone' by undo.lua, so that this request does nothing if it arrives after its undo
-- ARGV[1] lease in milliseconds
-- ARGV[2] owner id
-- ARGV[3] fencing counter TTL in milliseconds, refreshed on every fresh acquisition; 0: none
-- ARGV[4] '1' when the caller holds the lock for ARGV[2] already (a reentry), '0' when it holds nothing
-- ARGV[5] latch lifetime in milliseconds
-- Returns the token when ARGV[2] took the lock for a caller that held nothing (a bare integer: the common
-- reply is the cheapest for Redis to build), {1, token, count} for a caller that held it (count 1: the
-- lock was gone and is taken afresh), or {0, pttl} when another owner holds it (pttl -1: the request was
-- undone).
-- A caller that holds nothing gets count 1 even where ARGV[2] is in the hash already: that hold is this
-- request's, run before its reply was lost, or one its owner no longer knows of; nobody would release a
-- second count. Such a caller needs no latch: its resend finds the lock held by ARGV[2] and answers alike.
-- Its common case, a free lock and no undo, costs one EXISTS of both keys and the writes.
local function take() -- the lock is free: ARGV[2] takes it under a new token
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  local token = redis.call('incr', KEYS[2])
  if tonumber(ARGV[3]) > 0 then
    redis.call('pexpire', KEYS[2], ARGV[3])
  end
  return token
end
local function keep() -- a lock taken already: the lease from now, never shorter than it is
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  return tonumber(redis.call('get', KEYS[2]) or '0')
end

if ARGV[4] ~= '1' then
  if redis.call('exists', KEYS[1], KEYS[3]) == 0 then
    return take()
  end
  local count = redis.call('hget', KEYS[1], ARGV[2])
  if not count then
    local pttl = redis.call('pttl', KEYS[1])
    if pttl == -2 then -- no lock: the key found is the latch of an undo
      return {0, -1}
    end
    return {0, pttl}
  end
  if redis.call('get', KEYS[3]) == 'undone' then
    return {0, -1}
  end
  if count ~= '1' then
    redis.call('hset', KEYS[1], ARGV[2], 1)
  end
  return keep()
end

local done = redis.call('get', KEYS[3])
if done == 'undone' then
  return {0, -1}
elseif done then
  local count, token = string.match(done, '^(%d+):(%d+)$')
  return {1, tonumber(token), tonumber(count)}
end
local count, token = 1, nil
if redis.call('exists', KEYS[1]) == 0 then
  token = take()
elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  token = keep()
else
  return {0, redis.call('pttl', KEYS[1])}
end
redis.call('set', KEYS[3], count .. ':' .. token, 'px', ARGV[5])
return {1, token, count}
