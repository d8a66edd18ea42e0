-- Inbox: accept one routed message for a group, atomically.
-- KEYS: dedupe, seq, target (mailbox or context), lease, active [, media hold]
-- ARGV: dedupe ttl s, entry (JSON from Python), engaged 1/0, lease ttl ms, group, job id
-- The entry is stored as "<seq> <entry>": the group's arrival counter in front of the
-- Python-built JSON, so mailbox and context interleave in arrival order.
-- With the group's media hold (a message without files, from the inbox): while the group
-- holds messages for their files, this one must wait behind them, so nothing is done
-- and -2 tells the caller to hold it (media_hold.lua). One script for the common case.
-- Returns -2 behind the hold, -1 duplicate, 0 kept (no new job needed), 1 kept and the
-- caller must enqueue the drain job whose id it just wrote into the lease.
if KEYS[6] and redis.call('LLEN', KEYS[6]) > 0 then
  return -2
end
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return -1
end
local seq = redis.call('INCR', KEYS[2])
redis.call('RPUSH', KEYS[3], seq .. ' ' .. ARGV[2])
if ARGV[3] ~= '1' then
  return 0
end
redis.call('SADD', KEYS[5], ARGV[5])
if redis.call('SET', KEYS[4], ARGV[6], 'NX', 'PX', ARGV[4]) then
  return 1
end
return 0
