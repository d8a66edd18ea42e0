-- Inbox: hold one routed message until its attachments are downloaded, atomically.
-- KEYS: dedupe, hold (the group's list), groups (set of groups holding messages)
-- ARGV: dedupe ttl s, entry (JSON), group, force 1/0 (the message has attachments)
-- A message without attachments is held only when the group already holds one, so it
-- stays behind it (per-group order); else the caller pushes it as usual.
-- Returns -1 duplicate, 0 not held (push it), 1 held.
if ARGV[4] ~= '1' and redis.call('LLEN', KEYS[2]) == 0 then
  return 0
end
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return -1
end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[3])
return 1
