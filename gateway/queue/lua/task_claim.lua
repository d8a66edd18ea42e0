-- Scheduled tasks: claim the runs that are due, each by exactly one scheduler.
-- KEYS: due (sorted set: member "<group>\x1f<task id>", score = next fire time, epoch s),
--       claimed (hash: member -> the due time a claim stands for)
-- ARGV: now (epoch s), lease (s), limit
-- Each due member is pushed to now + lease (no other scheduler sees it due meanwhile)
-- and returned with the due time it stands for: its score, or, when an earlier claim
-- died before releasing, the due time that claim recorded (so the run keeps its id and
-- the mailbox's dedupe drops a second push of it).
-- Returns {member, due, member, due, ...}.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
local until_ = tonumber(ARGV[1]) + tonumber(ARGV[2])
for _, member in ipairs(due) do
  local first = redis.call('HGET', KEYS[2], member)
  if not first then
    first = redis.call('ZSCORE', KEYS[1], member)
    redis.call('HSET', KEYS[2], member, first)
  end
  redis.call('ZADD', KEYS[1], until_, member)
  table.insert(out, member)
  table.insert(out, first)
end
return out
