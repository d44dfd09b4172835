-- Before a write commits in Postgres: drop the cached data and the tickets of reads that
-- missed (their fills would carry a row read before this write), and count a hold, so
-- readers go to Postgres and fills are refused until the write lands here (`store_wrote`).
-- The entry lives at most the hold's time: a writer that dies leaves no stale value behind.
--
-- KEYS[1] entry       the item's hash
-- ARGV[1] hold_ms     how long the hold may last
--
-- returns the number of holds
redis.call('HDEL', KEYS[1], 'd', 't')
local n = redis.call('HINCRBY', KEYS[1], 'h', 1)
if n == 1 or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return n
