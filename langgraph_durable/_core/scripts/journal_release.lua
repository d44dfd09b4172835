-- Release entries a drain holds: they stay the drain's, idle as if for `reclaim` ms, so the
-- next flusher or drain to read the shard reclaims them at once. Left as they are with a
-- consumer that reads no more, they would wait until they sat idle for reclaim_after, and
-- every drain meanwhile with them. Given no ids, every entry the consumer holds: a drain
-- whose read Redis ran after the drain gave up on its reply (a Redis that froze, then
-- thawed) holds entries it never saw.
--
-- KEYS[1] journal    the shard's journal
-- ARGV[1] group      the consumer group
-- ARGV[2] consumer   the drain's name in it
-- ARGV[3] reclaim    ms an entry stays idle before another flusher takes it
-- ARGV[4..] ids...   the entries (none: all the consumer holds)
--
-- returns how many it released (an entry acknowledged meanwhile is not pending; a journal
-- emptied meanwhile holds none)
local ids = {}
for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then
  local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 10000, ARGV[2])
  if pending['err'] then return 0 end  -- the journal or its group is gone: nothing held
  for _, p in ipairs(pending) do ids[#ids + 1] = p[1] end
end
local n = 0
for i = 1, #ids, 100 do  -- a hundred at a time: unpack has a bounded stack
  local args = {KEYS[1], ARGV[1], ARGV[2], 0}
  for j = i, math.min(i + 99, #ids) do args[#args + 1] = ids[j] end
  args[#args + 1] = 'IDLE'
  args[#args + 1] = ARGV[3]
  args[#args + 1] = 'JUSTID'
  local claimed = redis.pcall('XCLAIM', unpack(args))
  if claimed['err'] then return n end  -- the journal or its group is gone: nothing held
  n = n + #claimed
end
return n
