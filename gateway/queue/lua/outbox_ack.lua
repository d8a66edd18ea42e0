-- Outbox: ack and delete handled entries in one call.
-- KEYS: stream   ARGV: consumer group, entry id...
redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
return redis.call('XDEL', KEYS[1], unpack(ARGV, 2))
