-- After a model request (or its failure): replace the reservation by the real cost.
-- KEYS: counters (n, as reserved), usage log (usage:{day}), soft marks (budget:soft)
-- ARGV: estimate reserved, real cost (micro-USD), counters' ttl, log ttl,
--       log field prefix ("kind\tgroup\tperson\t"), input, output, cached tokens,
--       estimated (0|1), now (what a soft mark records), then per counter i: its
--       soft-mark field, its soft budget (micro-USD, -1: none)
-- Returns the soft-mark fields crossed by this request (each is returned once ever).
-- The counters' TTL (ARGV[3], kept for the callers) is not set again here: every settle
-- follows the reserve of the same counters (budget_reserve.lua), which just set it.
local n = #KEYS - 2
local est, cost = tonumber(ARGV[1]), tonumber(ARGV[2])
local crossed = {}
for i = 1, n do
  redis.call('HINCRBY', KEYS[i], 'reserved', -est)
  local spent = redis.call('HINCRBY', KEYS[i], 'spent', cost)
  local soft = tonumber(ARGV[10 + 2 * i])
  if soft >= 0 and spent >= soft and spent - cost < soft then
    if redis.call('HSETNX', KEYS[n + 2], ARGV[9 + 2 * i], ARGV[10]) == 1 then
      crossed[#crossed + 1] = ARGV[9 + 2 * i]
    end
  end
end
local log, p = KEYS[n + 1], ARGV[5]
redis.call('HINCRBY', log, p .. 'cost', cost)
redis.call('HINCRBY', log, p .. 'req', 1)
-- the others only when not 0 (mostly cached and est): readers take a missing one as 0
for i, m in ipairs({'in', 'out', 'cached', 'est'}) do
  if tonumber(ARGV[5 + i]) ~= 0 then redis.call('HINCRBY', log, p .. m, ARGV[5 + i]) end
end
redis.call('EXPIRE', log, ARGV[4])
return crossed
