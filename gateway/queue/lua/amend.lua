-- An edit or deletion of an earlier message of a group, atomically.
-- KEYS: dedupe (of the edit/deletion event), mailbox, context, changes:{group}
-- ARGV: dedupe ttl s, the original's entry as read ("" = not seen waiting),
--       its replacement ("" = delete it), change record (JSON), changes cap,
--       final 1/0 (0: if that entry is no longer waiting, change nothing and return 2
--       so the caller reads again: another edit may have replaced it meanwhile)
-- If the original entry is still waiting in the mailbox or the context list it is
-- replaced (edit) or removed (deletion) before any turn takes it; otherwise (already
-- taken by a turn, or never seen) the change is appended to changes:{group} for the
-- memory layer. Returns -1 duplicate, 1 applied to a waiting message, 0 recorded,
-- 2 stale (nothing done).
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
if ARGV[2] ~= '' then
  for _, list in ipairs({KEYS[2], KEYS[3]}) do
    local pos = redis.call('LPOS', list, ARGV[2])
    if pos then
      if ARGV[3] == '' then
        redis.call('LREM', list, 1, ARGV[2])
      else
        redis.call('LSET', list, pos, ARGV[3])
      end
      redis.call('SET', KEYS[1], '1', 'EX', ARGV[1])
      return 1
    end
  end
  if ARGV[6] ~= '1' then return 2 end
end
redis.call('RPUSH', KEYS[4], ARGV[4])
redis.call('LTRIM', KEYS[4], -tonumber(ARGV[5]), -1)
redis.call('SET', KEYS[1], '1', 'EX', ARGV[1])
return 0
