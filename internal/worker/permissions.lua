-- Find the first command of ARGV that the user of this connection may not run, as its ACL decides
-- (redis.acl_check_cmd, Redis 7.0 and later, which checks the command, its keys and its channels).
-- ARGV[i] a command and its arguments, separated by newlines
-- Returns 0 when the ACL allows every command, i for the first it refuses, -1 when the server cannot tell
-- (before Redis 7.0). A command the server does not know (renamed away, or from a later version) is
-- skipped: that is not the ACL's doing.
if not redis.acl_check_cmd then
  return -1
end
for i = 1, #ARGV do
  local words = {}
  for word in string.gmatch(ARGV[i], '[^\n]+') do
    words[#words + 1] = word
  end
  local known, allowed = pcall(redis.acl_check_cmd, unpack(words))
  if known and not allowed then
    return i
  end
end
return 0
