-- Sweeper: take the lease of a group whose work has no live drain job.
-- KEYS: mailbox, processing, lease, active   ARGV: lease ttl ms, job id, group
-- Returns 1 when the caller must enqueue a drain (work waiting, lease taken for job id);
-- a group with nothing waiting leaves the active set.
if redis.call('LLEN', KEYS[1]) == 0 and redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('SREM', KEYS[4], ARGV[3])
  return 0
end
if redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[1]) then
  return 1
end
return 0
