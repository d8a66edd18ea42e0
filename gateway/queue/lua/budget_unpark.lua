-- A cap changed: every parked group goes back to ``active``; the sweeper then takes its
-- lease and enqueues its drain job (which parks it again if a cap still holds).
-- KEYS: parked, active
-- Returns how many groups were released.
local groups = redis.call('SMEMBERS', KEYS[1])
for _, g in ipairs(groups) do redis.call('SADD', KEYS[2], g) end
redis.call('DEL', KEYS[1])
return #groups
