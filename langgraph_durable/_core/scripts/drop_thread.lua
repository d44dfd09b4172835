-- Drop every hot key of a thread and clear the caller's intent (if any), leaving a
-- tombstone version: a copy read from Postgres before the change that caused the drop is
-- older than it, so no write or warm can bring it back. The unflushed hash stays: it
-- counts journal entries that are still on their way to Postgres.
-- With only_flushed = "1" a thread that has entries not yet flushed is left alone: its
-- copy holds writes Postgres lacks, so the caller flushes first.
--
-- KEYS[1] intents        the thread's write intents
-- KEYS[2] registry       the keys of the thread's copy
-- KEYS[3] versions       the thread's versions hash
-- KEYS[4] unflushed      the thread's unflushed hash
-- ARGV[1] token          the caller's intent token, or ""
-- ARGV[2] tombstone      version (0: none)
-- ARGV[3] ttl            ms (0: none)
-- ARGV[4] only_flushed   "1": refuse while unflushed, "": drop anyway
--
-- returns how many keys the copy had, or -1 if refused
--!include prelude.lua
if ARGV[4] == '1' and redis.call('EXISTS', KEYS[4]) == 1 then return -1 end
local dropped = drop_copy(KEYS[2])
local tomb = tonumber(ARGV[2])
if tomb > 0 then
  tomb = math.max(tomb, tonumber(redis.call('HGET', KEYS[3], '*') or '0') or 0)
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], '*', tomb)
  local ttl = tonumber(ARGV[3])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[3], ttl) end
end
clear_intent(KEYS[1], KEYS[3], ARGV[1])
return dropped
