-- Fill an item's entry from a Postgres read, only if the read's ticket is still there (no
-- write's hold took it since, and the entry did not go), no write is in flight, and the
-- cached version is older: a slow reader never puts back a value a writer replaced.
--
-- KEYS[1] entry       the item's hash
-- ARGV[1] ticket      the ticket the read's miss kept (`store_get`)
-- ARGV[2] version     the row's version (from the store's sequence)
-- ARGV[3] data        the row as the store caches it
-- ARGV[4] ttl         seconds the entry lives
--
-- returns 1 if filled, 0 if not
local e = redis.call('HMGET', KEYS[1], 'v', 'h', 't')
if e[3] ~= ARGV[1] then return 0 end
if e[2] and tonumber(e[2]) > 0 then return 0 end
if e[1] and tonumber(e[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'd', ARGV[3])
redis.call('HDEL', KEYS[1], 't')
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
