-- Delete one consumer of a group when it has no pending entries and has been idle longer than a minimum,
-- checked and done in one step: a consumer that reads an entry meanwhile is never deleted with it.
-- KEYS[1] stream
-- ARGV[1] consumer group
-- ARGV[2] consumer
-- ARGV[3] minimum idle in milliseconds: the consumer must have been idle longer
-- Returns {'deleted', idle ms} | {'pending', pending count} | {'active', idle ms} | {'missing', 0}.
local consumers = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
for _, c in ipairs(consumers) do
  local info = {}
  for i = 1, #c, 2 do
    info[c[i]] = c[i + 1]
  end
  if info['name'] == ARGV[2] then
    if info['pending'] > 0 then
      return {'pending', info['pending']}
    end
    if info['idle'] <= tonumber(ARGV[3]) then
      return {'active', info['idle']}
    end
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
    return {'deleted', info['idle']}
  end
end
return {'missing', 0}
