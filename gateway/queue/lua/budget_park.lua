-- Drain job: the turn stopped at a spending cap. Keep its messages, tell the chat once.
-- KEYS: lock, processing, mailbox, lease, active, parked, turn, told, outbox
-- ARGV: token, group, told ttl (s), notice reply event or "", done event
-- (an event: its stream field list as JSON, built by gateway/queue/events.py)
-- Only while the lock is ours: the batch goes back to the front of the mailbox (the next
-- take merges it with what arrived since; entries keep their seq and engaged flag), the
-- turn's attempt is not counted (a cap is no failure: no dead letter), the lease and
-- lock are released and the group leaves ``active`` for ``parked``, so the sweeper does
-- not re-run it: a cap change moves it back. The notice goes out once per period (the
-- told key), the done event always (it releases a waiting client).
-- Returns -1 lock lost, 0 parked, 1 parked and the notice published.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local batch = redis.call('LRANGE', KEYS[2], 0, -1)
for i = #batch, 1, -1 do redis.call('LPUSH', KEYS[3], batch[i]) end
redis.call('DEL', KEYS[2])
if redis.call('HEXISTS', KEYS[7], 'attempts') == 1 then
  redis.call('HINCRBY', KEYS[7], 'attempts', -1)
end
redis.call('DEL', KEYS[4])
redis.call('SREM', KEYS[5], ARGV[2])
redis.call('SADD', KEYS[6], ARGV[2])
redis.call('DEL', KEYS[1])
local told = 0
if ARGV[4] ~= '' and redis.call('SET', KEYS[8], '1', 'NX', 'EX', ARGV[3]) then
  redis.call('XADD', KEYS[9], '*', unpack(cjson.decode(ARGV[4])))
  told = 1
end
redis.call('XADD', KEYS[9], '*', unpack(cjson.decode(ARGV[5])))
return told
