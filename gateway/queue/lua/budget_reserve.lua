-- Before a model request: reserve its estimated cost under every cap that applies.
-- KEYS: counters (budget:{scope}:{period}, n of them), caps (budget:caps)
-- ARGV: estimate (micro-USD), counters' ttl (s), then per counter i: its field in caps,
--       its default cap (micro-USD, -1: none)
-- Atomic check-and-add, over the counters that have a cap (a run-time cap in
-- budget:caps, "none" = lifted, wins over the default): spent + reserved + estimate must
-- stay within each cap; then the estimate is added to those counters' ``reserved``. A
-- counter without a cap is neither read nor written here (its ``spent`` is kept by the
-- settle): nothing it holds could refuse a request. Returns the 1-based index of the
-- first counter whose cap refused it (nothing reserved), or minus the bit mask of the
-- counters the estimate was reserved under (bit i-1: counter i; 0: none) for the settle.
local n = #KEYS - 1
local est = tonumber(ARGV[1])
local fields = {}
for i = 1, n do fields[i] = ARGV[1 + 2 * i] end
local caps = redis.call('HMGET', KEYS[n + 1], unpack(fields))  -- one read for every cap
local held, fresh = {}, {}
for i = 1, n do
  local cap = caps[i]
  if not cap then cap = ARGV[2 + 2 * i] end
  if cap ~= 'none' and tonumber(cap) >= 0 then
    local v = redis.call('HMGET', KEYS[i], 'spent', 'reserved')
    local used = (tonumber(v[1]) or 0) + (tonumber(v[2]) or 0)
    if used + est > tonumber(cap) then return i end
    held[#held + 1] = i
    fresh[i] = not v[1] and not v[2]  -- no such key yet: it needs its TTL
  end
end
local mask = 0
for _, i in ipairs(held) do
  redis.call('HINCRBY', KEYS[i], 'reserved', est)
  if fresh[i] then redis.call('EXPIRE', KEYS[i], ARGV[2]) end
  mask = mask + 2 ^ (i - 1)
end
return -mask
