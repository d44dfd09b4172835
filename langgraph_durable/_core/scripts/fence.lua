-- A sweep's claim on a thread before it deletes any of it: an intent, taken only while no
-- live writer holds one and no write-behind entry of the thread waits for a flush. While it
-- is held, reads go to Postgres and write-behind writes go through Postgres (see put.lua),
-- whose row locks order them with the sweep's transaction; a second sweeper finds the
-- intent and leaves the thread alone. Released by the drop that follows.
--
-- KEYS[1] intents     the thread's write intents
-- KEYS[2] unflushed   the thread's unflushed hash
-- ARGV[1] token       the claim's token
-- ARGV[2] deadline    ms since epoch
-- ARGV[3] now         ms since epoch
--
-- returns 1 if claimed, 0 if the thread is busy
--!replicated
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('ZCOUNT', KEYS[1], ARGV[3], '+inf') > 0 then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('PERSIST', KEYS[1])
return 1
