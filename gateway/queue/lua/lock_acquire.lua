-- Group lock: take it and, with it, extend the lease (recreated if it lapsed).
-- KEYS: lock [, lease]   ARGV: token, lock ttl ms, lease ttl ms   Returns 1 if taken.
-- Without a lease key it is a plain lock (a person's, taken under a group lock).
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
if KEYS[2] and redis.call('PEXPIRE', KEYS[2], ARGV[3]) == 0 then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
end
return 1
