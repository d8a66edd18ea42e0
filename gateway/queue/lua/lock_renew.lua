-- Group lock: renew it if still ours, and the lease with it. The lease keeps its value
-- (the id of the job it stands for); recreated if it lapsed.
-- KEYS: lock [, lease]   ARGV: token, lock ttl ms, lease ttl ms   Returns 1 if renewed.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if KEYS[2] and redis.call('PEXPIRE', KEYS[2], ARGV[3]) == 0 then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
end
return 1
