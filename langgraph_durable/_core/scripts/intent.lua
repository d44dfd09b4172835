-- Announce a write-through write before its Postgres transaction. The set has no TTL, so
-- neither expiry nor a volatile-* eviction policy removes an intent whose writer died after
-- committing: it keeps readers on Postgres until a warm clears it (Redis deletes the set
-- when its last intent goes). The intent also marks the versions hash ("^<token>"): while
-- the mark is there, Redis has kept every version raised since the intent (an eviction or
-- a drop takes the whole hash), which is what lets the update after the commit start a
-- fresh index (see put.lua).
--
-- KEYS[1] intents         the thread's write intents
-- KEYS[2] unflushed       the thread's unflushed hash
-- KEYS[3] versions        the thread's versions hash
-- ARGV[1] token           the intent's token
-- ARGV[2] deadline        ms since epoch
-- ARGV[3] ttl             ms (0: none)
-- ARGV[4] member_prefix   the written namespace's unflushed member prefix ("<b64 ns>:";
--                         "": any namespace)
--
-- returns 1 if that namespace has write-behind entries not yet flushed, else 0
--!replicated
--!include prelude.lua
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('PERSIST', KEYS[1])
redis.call('HSET', KEYS[3], '^' .. ARGV[1], 1)
if tonumber(ARGV[3]) > 0 and redis.call('PTTL', KEYS[3]) == -1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return unflushed(KEYS[2], ARGV[4])
