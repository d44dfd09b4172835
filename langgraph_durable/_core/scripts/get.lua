-- Read one checkpoint (the latest of its namespace, or a given id) with its blobs and
-- pending writes, in one round trip. A thread with any write intent is busy: a write may
-- have committed in Postgres and not reached Redis yet, so the caller reads Postgres. A key
-- the thread's registry does not list is not part of its copy (it outlived an eviction or
-- a drop): the read is a miss.
-- A miss or busy reply hands out the thread's warm ticket (field "!" of its versions hash,
-- created if absent): the caller's warm is accepted only while the ticket is unchanged. A
-- Redis emptied, restarted or evicted between this read and the warm has lost the versions
-- a concurrent writer raised meanwhile; it has lost the ticket too, so the warm (built from
-- a Postgres read that may predate that writer) is refused. A ticket created here lives
-- TICKET_MS unless a write or warm gives the hash the thread's lifetime, so a read of an
-- unknown thread leaves nothing behind for long.
-- A checkpoint's key is checkpoint_prefix followed by its id (`ThreadKeys.checkpoint`).
--
-- KEYS[1] intents             the thread's write intents
-- KEYS[2] index               the namespace's checkpoint ids
-- KEYS[3] blobs               the namespace's blob hash
-- KEYS[4] registry            the keys of the thread's copy
-- KEYS[5] unflushed           the thread's unflushed hash
-- KEYS[6] versions            the thread's versions hash
-- ARGV[1] checkpoint_prefix   the namespace's checkpoint key prefix
-- ARGV[2] checkpoint_id       the checkpoint to read, or "" for the latest
-- ARGV[3] ttl                 ms (0: none)
-- ARGV[4] held                id of the checkpoint the caller holds decoded, or ""
-- ARGV[5] held_version        its version field "v", or ""
-- ARGV[6] member_prefix       the namespace's unflushed member prefix ("<b64 ns>:")
-- ARGV[7] ticket              a new warm ticket
--
-- returns {BUSY, dirty, ticket} | {MISS, dirty, ticket} (dirty = 1: the namespace has
--         entries not yet flushed; the caller drains the journal before it reads Postgres.
--         Entries of the thread's other namespaces do not change what Postgres holds for
--         this one, so a subgraph's first read does not wait for its parent's entries)
--       | {SAME, id} (the caller's copy is current)
--       | {HIT, id, field, value, ..., BLOBS, blob field, frame, ...}
--!include prelude.lua
--!include replies
local TICKET_MS = 60000

local function record(key, id)
  local h = redis.call('HGETALL', key)
  local refs = nil
  for i = 1, #h, 2 do
    if h[i] == 'bk' then refs = h[i + 1] end
  end
  if refs == nil then return nil end
  local out = {HIT, id}
  for i = 1, #h do out[#out + 1] = h[i] end
  out[#out + 1] = BLOBS
  local fields = cjson.decode(refs)
  if #fields > 0 then
    local values = redis.call('HMGET', KEYS[3], unpack(fields))
    for i = 1, #fields do
      if not values[i] then return nil end
      out[#out + 1] = fields[i]
      out[#out + 1] = values[i]
    end
  end
  return out
end
local function dirty()
  return unflushed(KEYS[5], ARGV[6])
end
local function ticket()
  local held_ticket = redis.call('HGET', KEYS[6], '!')
  if held_ticket then return held_ticket end
  local fresh = redis.call('EXISTS', KEYS[6]) == 0
  redis.call('HSET', KEYS[6], '!', ARGV[7])
  if fresh then redis.call('PEXPIRE', KEYS[6], TICKET_MS) end
  return ARGV[7]
end
local function miss()
  return {MISS, dirty(), ticket()}
end
if redis.call('ZCARD', KEYS[1]) > 0 then return {BUSY, dirty(), ticket()} end
if redis.call('SISMEMBER', KEYS[4], KEYS[2]) == 0 then return miss() end
local last = redis.call('ZRANGE', KEYS[2], -1, -1)
if #last == 0 then return miss() end
local id = ARGV[2]
if id == '' then id = last[1] end
if redis.call('SISMEMBER', KEYS[4], ARGV[1] .. id) == 0 then return miss() end
local ttl = tonumber(ARGV[3])
local out
if id == ARGV[4] and ARGV[5] ~= '' and redis.call('HGET', ARGV[1] .. id, 'v') == ARGV[5] then
  out = {SAME, id}
else
  out = record(ARGV[1] .. id, id)
  if out == nil then return miss() end
end
refresh(ARGV[1] .. id, ttl)
for i = 2, 4 do refresh(KEYS[i], ttl) end
return out
