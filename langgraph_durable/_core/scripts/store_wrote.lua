-- After a write committed in Postgres: release its hold and keep its row if no newer
-- version is cached. The entry keeps the hold's expiry while other writes are in flight.
--
-- KEYS[1] entry       the item's hash
-- ARGV[1] version     the write's version
-- ARGV[2] data        the row as the store caches it
-- ARGV[3] ttl         seconds the entry lives
--
-- returns the holds left
local e = redis.call('HMGET', KEYS[1], 'v', 'h')
local n = 0
if e[2] and tonumber(e[2]) > 0 then n = redis.call('HINCRBY', KEYS[1], 'h', -1) end
if not e[1] or tonumber(e[1]) < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'v', ARGV[1], 'd', ARGV[2])
end
if n <= 0 then
  redis.call('HDEL', KEYS[1], 'h')
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return n
