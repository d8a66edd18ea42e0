-- Turn: publish its reply (if any) and its "done" event to the outbox, once, and only
-- while the caller holds the group lock.
-- KEYS: lock, outbox, turn
-- ARGV: token, reply event or "", done event, reply text, has_reply 1/0
-- (an event: its stream field list as JSON, built by gateway/queue/events.py)
-- Returns -1 lock lost, 0 already published, 1 published now.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[3], 'published') then return 0 end
if ARGV[2] ~= '' then
  redis.call('XADD', KEYS[2], '*', unpack(cjson.decode(ARGV[2])))
end
redis.call('XADD', KEYS[2], '*', unpack(cjson.decode(ARGV[3])))
-- no EXPIRE: turn_begin.lua, which every attempt runs before this, just set the TTL
redis.call('HSET', KEYS[3], 'published', '1', 'reply', ARGV[4], 'has_reply', ARGV[5])
return 1
