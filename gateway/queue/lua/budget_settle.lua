-- After a model request (or its failure): replace the reservation by the real cost.
-- KEYS: counters (n, as reserved), usage log (usage:{day}), soft marks (budget:soft)
-- ARGV: estimate reserved, real cost (micro-USD), counters' ttl, log ttl,
--       log field prefix ("kind\tgroup\tperson\t"), input, output, cached tokens,
--       estimated (0|1), now (what a soft mark records), then per counter i: its
--       soft-mark field, its soft budget (micro-USD, -1: none)
-- Returns the soft-mark fields crossed by this request (each is returned once ever).
local n = #KEYS - 2
local est, cost = tonumber(ARGV[1]), tonumber(ARGV[2])
local crossed = {}
for i = 1, n do
  redis.call('HINCRBY', KEYS[i], 'reserved', -est)
  local spent = redis.call('HINCRBY', KEYS[i], 'spent', cost)
  redis.call('EXPIRE', KEYS[i], ARGV[3])
  local soft = tonumber(ARGV[10 + 2 * i])
  if soft >= 0 and spent >= soft and spent - cost < soft then
    if redis.call('HSETNX', KEYS[n + 2], ARGV[9 + 2 * i], ARGV[10]) == 1 then
      crossed[#crossed + 1] = ARGV[9 + 2 * i]
    end
  end
end
local log, p = KEYS[n + 1], ARGV[5]
redis.call('HINCRBY', log, p .. 'cost', cost)
redis.call('HINCRBY', log, p .. 'in', ARGV[6])
redis.call('HINCRBY', log, p .. 'out', ARGV[7])
redis.call('HINCRBY', log, p .. 'cached', ARGV[8])
redis.call('HINCRBY', log, p .. 'req', 1)
redis.call('HINCRBY', log, p .. 'est', ARGV[9])
redis.call('EXPIRE', log, ARGV[4])
return crossed
