-- Before a model request: reserve its estimated cost under every cap that applies.
-- KEYS: counters (budget:{scope}:{period}, n of them), caps (budget:caps)
-- ARGV: estimate (micro-USD), counters' ttl (s), then per counter i: its field in caps,
--       its default cap (micro-USD, -1: none)
-- Atomic check-and-add: for each counter, spent + reserved + estimate must stay within
-- its cap (a run-time cap in budget:caps, "none" = lifted, wins over the default);
-- then the estimate is added to every counter's ``reserved``. Returns 0 (reserved) or
-- the 1-based index of the first counter whose cap refused it (nothing reserved).
local n = #KEYS - 1
local est = tonumber(ARGV[1])
local fields = {}
for i = 1, n do fields[i] = ARGV[1 + 2 * i] end
local caps = redis.call('HMGET', KEYS[n + 1], unpack(fields))  -- one read for every cap
for i = 1, n do
  local cap = caps[i]
  if not cap then cap = ARGV[2 + 2 * i] end
  if cap ~= 'none' and tonumber(cap) >= 0 then
    local v = redis.call('HMGET', KEYS[i], 'spent', 'reserved')
    local used = (tonumber(v[1]) or 0) + (tonumber(v[2]) or 0)
    if used + est > tonumber(cap) then return i end
  end
end
for i = 1, n do
  redis.call('HINCRBY', KEYS[i], 'reserved', est)
  redis.call('EXPIRE', KEYS[i], ARGV[2])
end
return 0
