-- Fill an item's entry from a Postgres read, only if no write is in flight and the cached
-- version is older: a slow reader never puts back a value a writer replaced.
--
-- KEYS[1] entry       the item's hash
-- ARGV[1] version     the row's version (from the store's sequence)
-- ARGV[2] data        the row as the store caches it
-- ARGV[3] ttl         seconds the entry lives
--
-- returns 1 if filled, 0 if not
local e = redis.call('HMGET', KEYS[1], 'v', 'h')
if e[2] and tonumber(e[2]) > 0 then return 0 end
if e[1] and tonumber(e[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'd', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
