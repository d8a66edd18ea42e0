-- Delivery outcome of one reply chunk, recorded against its reply id.
-- KEYS: outcome:{reply} (hash: chunk index -> "delivered <platform id>" | "failed <reason>"),
--       undelivered:{group} (hash: reply_id, reason, at), delivery:counts (hash),
--       [sent:{reply}:{index}] (the outbox's "done with this chunk" mark, set here too so
--       the mark and the outcome are never one without the other)
-- ARGV: chunk index, "delivered"|"failed", platform id or reason, reply id,
--       channel, ttl s, now (unix s)
-- A failure marks the group's last reply undelivered (the next turn's prompt says so);
-- a delivered chunk of another reply clears that mark (a newer reply got through).
-- Returns 0 when the same outcome was already recorded (counted once), else 1.
local value = ARGV[2] .. ' ' .. ARGV[3]
if KEYS[4] then
  local mark = 'dropped'
  if ARGV[2] == 'delivered' then mark = ARGV[3] end
  redis.call('SET', KEYS[4], mark, 'EX', ARGV[6])
end
if redis.call('HGET', KEYS[1], ARGV[1]) == value then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], value)
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('HINCRBY', KEYS[3], ARGV[5] .. ':' .. ARGV[2], 1)
if ARGV[2] == 'failed' then
  redis.call('HSET', KEYS[2], 'reply_id', ARGV[4], 'reason', ARGV[3], 'at', ARGV[7])
  redis.call('EXPIRE', KEYS[2], ARGV[6])
else
  local marked = redis.call('HGET', KEYS[2], 'reply_id')
  if marked and marked ~= ARGV[4] then redis.call('DEL', KEYS[2]) end
end
return 1
