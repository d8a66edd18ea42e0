-- After a model request (or its failure): replace the reservation by the real cost.
-- KEYS: counters (n, as reserved), usage log (usage:{day}), soft marks (budget:soft)
-- ARGV: estimate reserved, real cost (micro-USD), counters' ttl, log ttl,
--       log field prefix ("kind\tgroup\tperson\t"), input, output, cached tokens,
--       estimated (0|1), now (what a soft mark records), then per counter i: its
--       soft-mark field, its soft budget (micro-USD, -1: none), held 1/0 (the reserve
--       put the estimate in its ``reserved``: budget_reserve.lua does so only under a cap)
-- Returns the soft-mark fields crossed by this request (each is returned once ever).
-- A TTL is set only on a key's first write (a counter's first spend in its period, a
-- call's first line in the day's log; budget_reserve.lua sets a capped counter's): each
-- key lives from its period's start, not from its last write, which is as long.
local n = #KEYS - 2
local est, cost = tonumber(ARGV[1]), tonumber(ARGV[2])
local crossed = {}
for i = 1, n do
  if ARGV[10 + 3 * i] == '1' then redis.call('HINCRBY', KEYS[i], 'reserved', -est) end
  if cost ~= 0 then  -- a failed request (cost 0) spends nothing
    local spent = redis.call('HINCRBY', KEYS[i], 'spent', cost)
    if spent == cost then redis.call('EXPIRE', KEYS[i], ARGV[3]) end
    local soft = tonumber(ARGV[9 + 3 * i])
    if soft >= 0 and spent >= soft and spent - cost < soft then
      if redis.call('HSETNX', KEYS[n + 2], ARGV[8 + 3 * i], ARGV[10]) == 1 then
        crossed[#crossed + 1] = ARGV[8 + 3 * i]
      end
    end
  end
end
local log, p = KEYS[n + 1], ARGV[5]
redis.call('HINCRBY', log, p .. 'cost', cost)
if redis.call('HINCRBY', log, p .. 'req', 1) == 1 then redis.call('EXPIRE', log, ARGV[4]) end
-- the others only when not 0 (mostly cached and est): readers take a missing one as 0
for i, m in ipairs({'in', 'out', 'cached', 'est'}) do
  if tonumber(ARGV[5 + i]) ~= 0 then redis.call('HINCRBY', log, p .. m, ARGV[5 + i]) end
end
return crossed
