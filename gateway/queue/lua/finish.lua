-- Drain job: a turn's batch is done.
-- KEYS: lock, processing, mailbox, lease, active [, turn]   ARGV: token, group
-- Clears processing (and, with the turn key, marks its episode written). Returns 1 if
-- more is waiting (keep going), 0 if the group is drained (lease and lock released,
-- atomically with the check, so a push cannot slip between), -1 if the lock is not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if KEYS[6] then redis.call('HSET', KEYS[6], 'written', '1') end
redis.call('DEL', KEYS[2])
if redis.call('LLEN', KEYS[3]) > 0 then return 1 end
redis.call('DEL', KEYS[4])
redis.call('SREM', KEYS[5], ARGV[2])
redis.call('DEL', KEYS[1])
return 0
