-- Undo one acquisition request whose outcome its caller does not know (its reply was lost or came too late),
-- whether the request ran already, runs later (it may still be on its way: the undo goes over another
-- connection) or never runs.
-- KEYS[1] lock hash
-- KEYS[2] unlock channel
-- KEYS[3] the acquisition's request latch (see acquire.lua): left 'undone', so that the request does nothing
--         if it arrives later
-- ARGV[1] owner id
-- ARGV[2] '1' when the caller held the lock for ARGV[1] before the request (a reentry), '0' when it held
--         nothing
-- ARGV[3] latch lifetime in milliseconds
-- ARGV[4] the command that sends the unlock message: 'publish' or 'spublish'
-- Returns 1 when the undo freed the lock (and sent the unlock message), 0 otherwise.
local done = redis.call('get', KEYS[3])
redis.call('set', KEYS[3], 'undone', 'px', ARGV[3])
if done == 'undone' then
  return 0
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not count then
  return 0
end
if ARGV[2] == '1' then
  -- The holds before the request are the caller's: take back only what the request added, as its latch
  -- says (none when it has not run: it will find the latch).
  if not done then
    return 0
  end
  if tonumber(string.match(done, '^(%d+):')) > 1 then
    if count > 1 then
      redis.call('hincrby', KEYS[1], ARGV[1], -1)
    end
    return 0
  end
end
-- A caller that held nothing owns none of ARGV[1]'s holds (nor of a lock the request took afresh).
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], '0')
return 1
