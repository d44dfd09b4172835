-- Release the entries of a drain whose commit failed: they stay the drain's, idle as if for
-- `reclaim` ms, so the next flusher or drain to read the shard reclaims them at once. Left
-- as they are with a consumer that reads no more, they would wait until they sat idle for
-- reclaim_after, and every drain meanwhile with them.
--
-- KEYS[1] journal    the shard's journal
-- ARGV[1] group      the consumer group
-- ARGV[2] consumer   the drain's name in it
-- ARGV[3] reclaim    ms an entry stays idle before another flusher takes it
-- ARGV[4..] ids...   the entries
--
-- returns how many it released (an entry acknowledged meanwhile is not pending; a journal
-- emptied meanwhile holds none)
local n = 0
for i = 4, #ARGV, 100 do  -- a hundred at a time: unpack has a bounded stack
  local args = {KEYS[1], ARGV[1], ARGV[2], 0}
  for j = i, math.min(i + 99, #ARGV) do args[#args + 1] = ARGV[j] end
  args[#args + 1] = 'IDLE'
  args[#args + 1] = ARGV[3]
  args[#args + 1] = 'JUSTID'
  local claimed = redis.pcall('XCLAIM', unpack(args))
  if claimed['err'] then return n end  -- the journal or its group is gone: nothing held
  n = n + #claimed
end
return n
