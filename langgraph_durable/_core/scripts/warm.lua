-- Load the latest checkpoint of a namespace, read from Postgres, into Redis ("head" mode),
-- or rewrite a damaged checkpoint the thread's copy already holds ("repair" mode, which
-- never touches the index: a read by id must not create or move a head). Refused while a
-- live writer is at work on the thread (its intent has not passed its deadline), while the
-- thread has entries not yet flushed (Redis is newer than Postgres), when the copy read is
-- older than one Redis has already seen (its version is below the namespace's version or
-- the thread's tombstone), and in "head" mode when the warm ticket the read was handed has
-- gone (Redis lost the versions hash since: see get.lua).
-- Expired intents (writers that died) are cleared with the thread's whole copy (they may
-- have left any namespace stale): the Postgres read that preceded this call saw whatever
-- they committed.
-- The namespace's checkpoint key prefix is the checkpoint's key without its id.
--
-- KEYS[1] intents        the thread's write intents
-- KEYS[2] index          the namespace's checkpoint ids
-- KEYS[3] blobs          the namespace's blob hash
-- KEYS[4] checkpoint     the checkpoint's hash
-- KEYS[5] registry       the keys of the thread's copy
-- KEYS[6] unflushed      the thread's unflushed hash
-- KEYS[7] versions       the thread's versions hash
-- ARGV[1] now            ms since epoch
-- ARGV[2] ttl            ms (0: none)
-- ARGV[3] checkpoint_id  the checkpoint's id
-- ARGV[4] frame          the checkpoint's frame
-- ARGV[5] metadata       its metadata
-- ARGV[6] parent         its parent's id, or ""
-- ARGV[7] refs           its blob fields (a JSON array)
-- ARGV[8] version        the version read
-- ARGV[9] field          the namespace's field in the versions hash
-- ARGV[10] mode          "head" or "repair"
-- ARGV[11] n             number of blob pairs
-- ARGV[12] ticket        the ticket the read's miss handed out
-- ARGV[13..12+2n] blob_pairs...   blob field, frame
-- ARGV[13+2n..] fields...         field, value of the checkpoint hash (pending writes,
--                                 and "v" with a new version token)
--
-- returns 1 if warmed, 0 if refused
--!include prelude.lua
local head = ARGV[10] == 'head'
if head and redis.call('HGET', KEYS[7], '!') ~= ARGV[12] then return 0 end
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
for _, token in ipairs(expired) do clear_intent(KEYS[1], KEYS[7], token) end
if redis.call('ZCARD', KEYS[1]) > 0 then return 0 end
if redis.call('EXISTS', KEYS[6]) == 1 then return 0 end
if #expired > 0 then
  -- a writer died between its commit and its Redis update, in any namespace of the
  -- thread: the intent protected them all, so the whole copy goes before it does
  drop_copy(KEYS[5])
end
local version = tonumber(ARGV[8])
if version < held(KEYS[7], ARGV[9]) then return 0 end
if not head and redis.call('SISMEMBER', KEYS[5], KEYS[4]) == 0 then return 0 end
local ttl = tonumber(ARGV[2])
local n = tonumber(ARGV[11])
if head then adopt(KEYS[5], KEYS[2], KEYS[3], string.sub(KEYS[4], 1, #KEYS[4] - #ARGV[3])) end
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[4], 'c', ARGV[4], 'm', ARGV[5], 'p', ARGV[6], 'bk', ARGV[7], '@', ARGV[8])
if #ARGV > 12 + 2 * n then redis.call('HSET', KEYS[4], unpack(ARGV, 13 + 2 * n)) end
if n > 0 then redis.call('HSET', KEYS[3], unpack(ARGV, 13, 12 + 2 * n)) end
if head then
  redis.call('ZADD', KEYS[2], 0, ARGV[3])
  redis.call('SADD', KEYS[5], KEYS[2], KEYS[3], KEYS[4])
  raise_version(KEYS[7], ARGV[9], version)
end
for i = 2, 5 do settle(KEYS[i], ttl) end
settle_versions(KEYS[7], ttl)
return 1
