-- A closing saver leaves the consumer group, unless it still holds entries (they wait
-- for another flusher to reclaim them).
--
-- KEYS[1] journal    the shard's journal
-- ARGV[1] group      the consumer group
-- ARGV[2] consumer   the saver's name in it
--
-- returns 1 if it left, else 0
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if pending['err'] or #pending > 0 then return 0 end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) >= 0 and 1 or 0
