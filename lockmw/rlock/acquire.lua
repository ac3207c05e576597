-- Acquire a reentrant lock in the Redisson RLock layout, with a fencing token as in Redisson's RFencedLock.
-- KEYS[1] lock hash (field = owner id, value = reentry count)
-- KEYS[2] fencing counter
-- KEYS[3] request latch: written by a reentry only (count:token), so that a resend of it (go-redis sends a
--         command again after a lost connection) answers the same instead of counting a second hold; left
--         'undone' by undo.lua, so that this request does nothing if it arrives after its undo
-- ARGV[1] lease in milliseconds
-- ARGV[2] owner id
-- ARGV[3] fencing counter TTL in milliseconds, refreshed on every fresh acquisition; 0 or absent: none
-- ARGV[4] '1' when the caller holds the lock for ARGV[2] already (a reentry); '0' or absent when it holds
--         nothing (a fresh acquisition passes only ARGV[1], ARGV[2] and a TTL: each argument costs Redis)
-- ARGV[5] latch lifetime in milliseconds (read by a reentry only)
-- Returns the token when ARGV[2] took the lock for a caller that held nothing (a bare integer: the common
-- reply is the cheapest for Redis to build), {1, token, count} for a caller that held it (count 1: the
-- lock was gone and is taken afresh), or {0, pttl} when another owner holds it (pttl < 0: the request was
-- undone).
-- A caller that holds nothing gets count 1 even where ARGV[2] is in the hash already: that hold is this
-- request's, run before its reply was lost, or one its owner no longer knows of; nobody would release a
-- second count. Such a caller needs no latch: its resend finds the lock held by ARGV[2] and answers alike.
-- Its common case, a free lock and no undo, costs one EXISTS of both keys and the writes.
local held, count, token = ARGV[4] == '1', 1, nil
if not held and redis.call('exists', KEYS[1], KEYS[3]) > 0 then -- the lock is taken, or this request undone
  local found = redis.call('hget', KEYS[1], ARGV[2])
  if not found then -- another owner's lock, or none (pttl -2): the key found is the latch of an undo
    return {0, redis.call('pttl', KEYS[1])}
  end
  if redis.call('get', KEYS[3]) == 'undone' then
    return {0, -1}
  end
  if found ~= '1' then
    redis.call('hset', KEYS[1], ARGV[2], 1)
  end
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then -- never shorten an extended lease
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  return tonumber(redis.call('get', KEYS[2]) or '0')
end
if held then
  local done = redis.call('get', KEYS[3])
  if done == 'undone' then
    return {0, -1}
  elseif done then
    local latched, latchedToken = string.match(done, '^(%d+):(%d+)$')
    return {1, tonumber(latchedToken), tonumber(latched)}
  end
  if redis.call('exists', KEYS[1]) == 1 then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
      return {0, redis.call('pttl', KEYS[1])}
    end
    count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
      redis.call('pexpire', KEYS[1], ARGV[1])
    end
    token = tonumber(redis.call('get', KEYS[2]) or '0')
  end
end
if not token then -- the lock is free: ARGV[2] takes it under a new token
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  token = redis.call('incr', KEYS[2])
  if tonumber(ARGV[3] or '0') > 0 then
    redis.call('pexpire', KEYS[2], ARGV[3])
  end
end
if not held then
  return token
end
redis.call('set', KEYS[3], count .. ':' .. token, 'px', ARGV[5])
return {1, token, count}
