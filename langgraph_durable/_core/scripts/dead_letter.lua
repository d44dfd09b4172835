-- Put a dead letter back on the journal (after the cause was fixed) or drop it.
--
-- KEYS[1] dead            the shard's dead letters
-- KEYS[2] journal         its journal
-- KEYS[3] journal_bytes   its byte counter
-- KEYS[4] unflushed       the unflushed hash of the letter's thread
-- ARGV[1] letter          the dead letter's id
-- ARGV[2] action          "retry" or "drop"
-- ARGV[3] member          the letter's unflushed member
--
-- returns the new journal entry id (retry), "dropped", or "" if there is no such letter
local entry = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1]
if not entry then return '' end
redis.call('XDEL', KEYS[1], ARGV[1])
if ARGV[2] == 'drop' then return 'dropped' end
local payload
for i = 1, #entry[2], 2 do
  if entry[2][i] == 'd' then payload = entry[2][i + 1] end
end
redis.call('HINCRBY', KEYS[4], ARGV[3], 1)  -- the unflushed hash never has a TTL
redis.call('INCRBY', KEYS[3], string.len(payload))
return redis.call('XADD', KEYS[2], '*', 'd', payload)
