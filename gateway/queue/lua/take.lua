-- Drain job: the batch of the next turn (context + mailbox -> processing, all of it).
-- KEYS: lock, lease, processing, context, mailbox
-- ARGV: token, lock ttl ms, lease ttl ms, acquire 1/0
-- With acquire=1 (a job's first step) it first takes the lock (SET NX) and extends the
-- lease with it (recreated if it lapsed), as lock_acquire.lua does; else it checks the
-- lock is still ours. A batch left in processing (a crashed turn) is retried as is.
-- Returns the batch ({} = nothing waiting), -1 lock not ours, -2 lock held by another.
if ARGV[4] == '1' then
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return -2 end
  if redis.call('PEXPIRE', KEYS[2], ARGV[3]) == 0 then
    redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
  end
elseif redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local held = redis.call('LRANGE', KEYS[3], 0, -1)
if #held > 0 then return held end
local mailbox = redis.call('LRANGE', KEYS[5], 0, -1)
if #mailbox == 0 then return {} end
-- the batch as read, moved in a few commands (not one per entry): context, then mailbox
local batch = redis.call('LRANGE', KEYS[4], 0, -1)
if #batch == 0 then  -- the mailbox alone: it becomes processing (which is empty) whole
  redis.call('RENAME', KEYS[5], KEYS[3])
  return mailbox
end
redis.call('DEL', KEYS[4])
for i = 1, #mailbox do batch[#batch + 1] = mailbox[i] end
redis.call('DEL', KEYS[5])
for i = 1, #batch, 1000 do  -- unpack has a stack limit
  redis.call('RPUSH', KEYS[3], unpack(batch, i, math.min(i + 999, #batch)))
end
return batch
