-- Drain job: a turn's batch is done.
-- KEYS: lock, processing, mailbox, lease, active [, turn, episodes [, extractq]]
-- ARGV: token, group [, extraction entry, extractq bound]
-- Clears processing; with the turn key, marks its episode written and counts it in the
-- group's episodes-since-consolidation counter, and (with extractq) queues the batch for
-- fact extraction (bounded: the oldest entries beyond the bound are dropped). Returns
-- {status, episodes}: status 1 if more is waiting (keep going), 0 if the group is
-- drained (lease and lock released, atomically with the check, so a push cannot slip
-- between), -1 if the lock is not ours; episodes is the counter after this turn (0
-- without a turn key).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, 0} end
local episodes = 0
if KEYS[6] then
  redis.call('HSET', KEYS[6], 'written', '1')
  episodes = redis.call('INCR', KEYS[7])
  if KEYS[8] then
    redis.call('RPUSH', KEYS[8], ARGV[3])
    redis.call('LTRIM', KEYS[8], -tonumber(ARGV[4]), -1)
  end
end
if redis.call('LLEN', KEYS[3]) > 0 then
  redis.call('DEL', KEYS[2])
  return {1, episodes}
end
redis.call('DEL', KEYS[2], KEYS[4], KEYS[1])  -- processing, lease, lock: one command
redis.call('SREM', KEYS[5], ARGV[2])
return {0, episodes}
