-- The media job pushed the held head of a group's list into its mailbox: drop it.
-- KEYS: hold, groups   ARGV: the entry pushed, group
-- The head is removed only if it is still that entry (a redo after a crash finds it
-- again); the group leaves the set in the same step as its list empties, so a message
-- held meanwhile is never left in a list nobody looks at.
if redis.call('LINDEX', KEYS[1], 0) == ARGV[1] then
  redis.call('LPOP', KEYS[1])
end
if redis.call('LLEN', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[2])
  return 0
end
return 1
