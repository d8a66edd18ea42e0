-- Redaction: rebuild a stream so that no byte of it keeps removed words.
-- XDEL only marks an entry deleted inside its listpack, and DUMP, RDB and the AOF's RDB
-- preamble save the listpack as it is: the entries are copied into a new stream (same
-- ids, ``ARGV`` replacing some), with the stream's last id, counters, consumer groups,
-- their consumers and pending entries (owner, idle time, delivery count) as they were.
-- KEYS[1]: the stream
-- ARGV: pairs (entry id, JSON array of its new field/value list)
-- Returns how many entries the new stream holds (0 when it did not exist).
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return 0 end
local new = {}
for i = 1, #ARGV, 2 do new[ARGV[i]] = cjson.decode(ARGV[i + 1]) end
local function map(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end
local info = map(redis.call('XINFO', 'STREAM', key))
local groups = {}
for _, raw in ipairs(redis.call('XINFO', 'GROUPS', key)) do
  local g = map(raw)
  local pending = {}
  if tonumber(g['pending']) > 0 then
    pending = redis.call('XPENDING', key, g['name'], '-', '+', g['pending'])
  end
  local consumers = {}
  for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', key, g['name'])) do
    table.insert(consumers, map(c)['name'])
  end
  table.insert(groups, {g, pending, consumers})
end
local entries = redis.call('XRANGE', key, '-', '+')
redis.call('DEL', key)
for _, e in ipairs(entries) do
  redis.call('XADD', key, e[1], unpack(new[e[1]] or e[2]))
end
if #entries == 0 then
  if #groups == 0 then return 0 end  -- nothing left to keep: the key stays deleted
  redis.call('XGROUP', 'CREATE', key, groups[1][1]['name'], '0', 'MKSTREAM')
  redis.call('XGROUP', 'DESTROY', key, groups[1][1]['name'])
end
local setid = {'XSETID', key, info['last-generated-id'], 'ENTRIESADDED', info['entries-added']}
if info['max-deleted-entry-id'] then
  table.insert(setid, 'MAXDELETEDID')
  table.insert(setid, info['max-deleted-entry-id'])
end
redis.call(unpack(setid))
for _, group in ipairs(groups) do
  local g, pending, consumers = group[1], group[2], group[3]
  local create = {'XGROUP', 'CREATE', key, g['name'], g['last-delivered-id']}
  if g['entries-read'] then
    table.insert(create, 'ENTRIESREAD')
    table.insert(create, g['entries-read'])
  end
  redis.call(unpack(create))
  for _, c in ipairs(consumers) do
    redis.call('XGROUP', 'CREATECONSUMER', key, g['name'], c)
  end
  for _, p in ipairs(pending) do  -- p: id, consumer, idle ms, deliveries
    redis.call('XCLAIM', key, g['name'], p[2], 0, p[1], 'IDLE', p[3], 'RETRYCOUNT', p[4],
               'FORCE', 'JUSTID')
  end
end
return #entries
