-- Write-behind: a read of a namespace's latest checkpoint that missed in Redis found none
-- in Postgres either. Marks the namespace known empty ("~<field>" in the versions hash), so
-- the first root written behind may start its index in Redis. Refused when anything may
-- have happened to the namespace since the miss handed out its ticket: the ticket has gone
-- (Redis lost the hash), a write-through write or sweep is in flight, entries of the
-- namespace wait for a flush, the index is in the copy, or Redis knows a version or
-- tombstone of it (a drop also takes the mark, with the hash).
--
-- KEYS[1] intents         the thread's write intents
-- KEYS[2] registry        the keys of the thread's copy
-- KEYS[3] unflushed       the thread's unflushed hash
-- KEYS[4] versions        the thread's versions hash
-- KEYS[5] index           the namespace's checkpoint ids
-- ARGV[1] ticket          the ticket the miss handed out
-- ARGV[2] field           the namespace's field in the versions hash
-- ARGV[3] member_prefix   the namespace's unflushed member prefix
--
-- returns 1 if marked, 0 if refused
--!include prelude.lua
if redis.call('HGET', KEYS[4], '!') ~= ARGV[1] then return 0 end
if redis.call('ZCARD', KEYS[1]) > 0 then return 0 end
if unflushed(KEYS[3], ARGV[3]) == 1 then return 0 end
if redis.call('SISMEMBER', KEYS[2], KEYS[5]) == 1 then return 0 end
if held(KEYS[4], ARGV[2]) > 0 then return 0 end
redis.call('HSET', KEYS[4], '~' .. ARGV[2], 1)
return 1
