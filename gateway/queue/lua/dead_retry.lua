-- Dead letters: put a group's dead batches back into its mailbox, once, atomically.
-- KEYS: dead, mailbox, lease, active, dead log, then the turn records (and the sent
--       marks of their notices) to clear
-- ARGV: lease ttl ms, group, job id
-- The entries keep their "<seq> " prefix, so the next batch is in arrival order whatever
-- else waits in the mailbox. The turn records of the dead turns are deleted: the same
-- messages make the same turn id, whose record would replay the stored failure notice.
-- Returns {moved, 1 if the caller must enqueue job id (it now holds the lease) else 0}.
local items = redis.call('LRANGE', KEYS[1], 0, -1)
if #items == 0 then return {0, 0} end
for i = 1, #items do redis.call('RPUSH', KEYS[2], items[i]) end
redis.call('DEL', KEYS[1], KEYS[5])
for i = 6, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('SADD', KEYS[4], ARGV[2])
if redis.call('SET', KEYS[3], ARGV[3], 'NX', 'PX', ARGV[1]) then
  return {#items, 1}
end
return {#items, 0}
