-- Redaction: take deleted or forgotten words out of a group's lists, atomically.
-- KEYS: the lists that may still hold them (context, mailbox, processing, dead)
-- ARGV: pairs (an entry as read, its replacement; "" = remove the entry)
-- An entry found in no list any more (another change replaced it meanwhile) is left to
-- the caller, who reads again. Returns how many entries were replaced or removed.
local n = 0
for i = 1, #ARGV, 2 do
  for _, list in ipairs(KEYS) do
    local pos = redis.call('LPOS', list, ARGV[i])
    if pos then
      if ARGV[i + 1] == '' then
        redis.call('LREM', list, 1, ARGV[i])
      else
        redis.call('LSET', list, pos, ARGV[i + 1])
      end
      n = n + 1
      break
    end
  end
end
return n
