-- Send rate limit (GCRA), Redis' clock deciding so every process agrees.
-- KEYS: bucket   ARGV: interval ms, burst
-- Returns 0 when a send may go now (and records it), else the ms to wait.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local tau = interval * (tonumber(ARGV[2]) - 1)
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
if now < tat - tau then return tat - tau - now end
local new_tat = tat + interval
redis.call('SET', KEYS[1], new_tat, 'PX', new_tat - now + 1000)
return 0
