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
if redis.call('LLEN', KEYS[3]) > 0 then return redis.call('LRANGE', KEYS[3], 0, -1) end
if redis.call('LLEN', KEYS[5]) == 0 then return {} end
for _, src in ipairs({KEYS[4], KEYS[5]}) do
  local items = redis.call('LRANGE', src, 0, -1)
  for i = 1, #items do redis.call('RPUSH', KEYS[3], items[i]) end
  redis.call('DEL', src)
end
return redis.call('LRANGE', KEYS[3], 0, -1)
