-- Hand a flusher a batch: its own entries not yet acknowledged (a failed commit), else
-- entries another flusher took and left idle (it died), else new ones. Creates the
-- consumer group on first use. A batch holds at most `count` entries and, past its first
-- entry, at most `cap` payload bytes; entries are taken one at a time, so an entry that
-- would overflow the batch stays pending for this consumer and leads the next batch. With
-- nothing to hand out, removes consumers idle for `forget` ms that hold no entry (savers
-- that closed or died).
--
-- KEYS[1] journal     the shard's journal
-- ARGV[1] group       the consumer group
-- ARGV[2] consumer    this flusher's name in it
-- ARGV[3] count       entries at most
-- ARGV[4] reclaim     ms an entry stays idle before another flusher takes it
-- ARGV[5] cap         payload bytes at most
-- ARGV[6] forget      ms a consumer holding nothing stays idle before it goes (0: never)
--
-- returns {{id, {field, value, ...}}, ...}
redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
local count, cap = tonumber(ARGV[3]), tonumber(ARGV[5])
local out, total = {}, 0
-- adds an entry; false once the batch is full
local function take(entry)
  if not (entry and entry[2]) then return true end
  local size = 0
  for i = 2, #entry[2], 2 do size = size + string.len(entry[2][i]) end
  if #out > 0 and total + size > cap then return false end
  out[#out + 1] = entry
  total = total + size
  return #out < count and total < cap
end
for _, p in ipairs(redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', count, ARGV[2])) do
  local entry = redis.call('XRANGE', KEYS[1], p[1], p[1])[1]
  if not entry then redis.call('XACK', KEYS[1], ARGV[1], p[1])  -- deleted meanwhile
  elseif not take(entry) then break end
end
if #out > 0 then return out end
local cursor, more = '0-0', true
repeat
  local claimed = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[4], cursor,
                             'COUNT', 1)
  cursor = claimed[1]
  for _, entry in ipairs(claimed[2]) do more = take(entry) and more end
until cursor == '0-0' or not more
if #out > 0 then return out end
while more do
  local fresh = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1,
                           'STREAMS', KEYS[1], '>')
  if not fresh then break end
  more = take(fresh[1][2][1])
end
if #out == 0 and tonumber(ARGV[6]) > 0 then
  for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
    local info = {}
    for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
    if info['name'] ~= ARGV[2] and info['pending'] == 0
       and info['idle'] > tonumber(ARGV[6]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    end
  end
end
return out
