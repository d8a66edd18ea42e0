-- Turn: read its progress and, unless it was published, count the attempt and (within
-- max attempts) show the typing indicator, and read the group's undelivered mark (the
-- prompt's note). One round trip to start a turn.
-- KEYS: turn, outbox, undelivered:{g}   ARGV: state ttl s, typing event or "", max attempts
-- (an event: its stream field list as JSON, built by gateway/queue/events.py)
-- Returns [published, reply, has_reply, written, attempts] (nil where unset), and when
-- not published the undelivered mark's field/value list after them.
local st = redis.call('HMGET', KEYS[1], 'published', 'reply', 'has_reply', 'written', 'attempts')
if st[1] then return st end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('EXPIRE', KEYS[1], ARGV[1])
st[5] = n
if ARGV[2] ~= '' and n <= tonumber(ARGV[3]) then
  redis.call('XADD', KEYS[2], '*', unpack(cjson.decode(ARGV[2])))
end
st[6] = redis.call('HGETALL', KEYS[3])
return st
