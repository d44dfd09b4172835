"""Lua scripts of the hot tier; each runs atomically.

Every script touches keys of one hash slot. Thread scripts touch only keys under the
thread's hash tag. The write-behind scripts also append to the flush journal: on a single
node with one journal it is a key of its own; with journal shards (always on a Redis
Cluster) the thread's keys carry its shard's tag, beside the shard's journal, so the
script stays on one slot (see `keys.Layout` and docs/failure-model.md).

TTL rule: a write-behind write PERSISTs what it touches until the flusher has moved it
to Postgres; reads extend a TTL but never add one (`refresh`), so an unflushed key cannot
expire.
"""

from __future__ import annotations

TICKET_MS = 60_000  # life of a warm ticket a read of a thread without versions creates

_PRELUDE = """
local function refresh(key, ttl)
  if ttl > 0 and redis.call('PTTL', key) > 0 then redis.call('PEXPIRE', key, ttl) end
end
local function settle(key, ttl)
  if ttl < 0 then redis.call('PERSIST', key)
  elseif ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end
-- The newest version of a namespace's copy Redis has seen: its own, or the thread's
-- tombstone (set when the thread was dropped), whichever is larger.
local function held(vkey, field)
  local own = tonumber(redis.call('HGET', vkey, field) or '0') or 0
  local tomb = tonumber(redis.call('HGET', vkey, '*') or '0') or 0
  return math.max(own, tomb), tomb
end
-- The versions hash outlives the thread's other keys: with no hot TTL (0) it has none.
local function settle_versions(vkey, ttl)
  if ttl <= 0 then redis.call('PERSIST', vkey) else redis.call('PEXPIRE', vkey, ttl) end
end
local function raise_version(vkey, field, version)
  if version > (tonumber(redis.call('HGET', vkey, field) or '0') or 0) then
    redis.call('HSET', vkey, field, version)
  end
end
-- Whether the thread's unflushed hash counts entries of the namespace whose members start
-- with `prefix` ("<b64 ns>:"; "" for any namespace).
local function unflushed(ukey, prefix)
  if prefix == '' then return redis.call('EXISTS', ukey) end
  local members = redis.call('HKEYS', ukey)
  for i = 1, #members do
    if string.sub(members[i], 1, #prefix) == prefix then return 1 end
  end
  return 0
end
-- Clear a write-through writer's intent and its mark in the versions hash (see INTENT).
local function clear_intent(intents, vkey, token)
  if token ~= '' then
    redis.call('ZREM', intents, token)
    redis.call('HDEL', vkey, '^' .. token)
  end
end
-- Delete a thread's hot copy: every key its registry lists, and the registry. Returns how
-- many keys it listed. (The unflushed hash and the versions hash are not listed.)
local function drop_copy(registry)
  local keys = redis.call('SMEMBERS', registry)
  for i = 1, #keys, 500 do
    redis.call('DEL', unpack(keys, i, math.min(i + 499, #keys)))
  end
  redis.call('DEL', registry)
  return #keys
end
-- A namespace's index and blob hash belong to the thread's copy only while the registry
-- lists them. Keys it does not list outlived an eviction or a drop: remove them (and the
-- checkpoints their index names) before anything is written next to them.
local function adopt(registry, index, blobs, prefix)
  if redis.call('SISMEMBER', registry, index) == 1 then return end
  for _, id in ipairs(redis.call('ZRANGE', index, 0, -1)) do
    redis.call('DEL', prefix .. id)
  end
  redis.call('DEL', index, blobs)
end
"""

# Read one checkpoint (the latest of its namespace, or a given id) with its blobs and
# pending writes, in one round trip. A thread with any write intent is "busy": a write
# may have committed in Postgres and not reached Redis yet, so the caller reads Postgres.
# A key the thread's registry does not list is not part of its copy (it outlived an
# eviction or a drop): the read is a miss.
# A miss or busy reply hands out the thread's warm ticket (field "!" of its versions hash,
# created if absent): the caller's warm is accepted only while the ticket is unchanged.
# A Redis emptied, restarted or evicted between this read and the warm has lost the
# versions a concurrent writer raised meanwhile; it has lost the ticket too, so the warm
# (built from a Postgres read that may predate that writer) is refused. A ticket created
# here lives TICKET_MS unless a write or warm gives the hash the thread's lifetime, so a
# read of an unknown thread leaves nothing behind for long.
# KEYS[1] intents  KEYS[2] index(ns)  KEYS[3] blobs(ns)  KEYS[4] registry  KEYS[5] unflushed
# KEYS[6] versions hash
# ARGV[1] checkpoint key prefix  ARGV[2] checkpoint id or ""  ARGV[3] ttl ms (0: none)
# ARGV[4] id the caller holds decoded ("" if none)  ARGV[5] its version field "v"
# ARGV[6] the namespace's unflushed member prefix ("<b64 ns>:")  ARGV[7] a new ticket
# returns {"busy", dirty, ticket} | {"miss", dirty, ticket} (dirty = 1: the namespace has
#         entries not yet flushed; the caller drains the journal before it reads Postgres.
#         Entries of the thread's other namespaces do not change what Postgres holds for
#         this one, so a subgraph's first read does not wait for its parent's entries)
#       | {"same", id} (the caller's copy is current)
#       | {"hit", id, field, value, ..., "\0blobs", field, frame, ...}
GET_SCRIPT = (
    _PRELUDE
    + f"local TICKET_MS = {TICKET_MS}\n"
    + """
local function record(key, id)
  local h = redis.call('HGETALL', key)
  local refs = nil
  for i = 1, #h, 2 do
    if h[i] == 'bk' then refs = h[i + 1] end
  end
  if refs == nil then return nil end
  local out = {'hit', id}
  for i = 1, #h do out[#out + 1] = h[i] end
  out[#out + 1] = '\\0blobs'
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
  return {'miss', dirty(), ticket()}
end
if redis.call('ZCARD', KEYS[1]) > 0 then return {'busy', dirty(), ticket()} end
if redis.call('SISMEMBER', KEYS[4], KEYS[2]) == 0 then return miss() end
local last = redis.call('ZRANGE', KEYS[2], -1, -1)
if #last == 0 then return miss() end
local id = ARGV[2]
if id == '' then id = last[1] end
if redis.call('SISMEMBER', KEYS[4], ARGV[1] .. id) == 0 then return miss() end
local ttl = tonumber(ARGV[3])
local out
if id == ARGV[4] and ARGV[5] ~= '' and redis.call('HGET', ARGV[1] .. id, 'v') == ARGV[5] then
  out = {'same', id}
else
  out = record(ARGV[1] .. id, id)
  if out == nil then return miss() end
end
refresh(ARGV[1] .. id, ttl)
for i = 2, 4 do refresh(KEYS[i], ttl) end
return out
"""
)

# Clear a write intent whose write committed nothing (the head had moved on).
# KEYS[1] intents  KEYS[2] versions hash  ARGV[1] token
RELEASE_SCRIPT = _PRELUDE + """
clear_intent(KEYS[1], KEYS[2], ARGV[1])
return 1
"""

# Announce a write-through write before its Postgres transaction. The set has no TTL, so
# neither expiry nor a volatile-* eviction policy removes an intent whose writer died after
# committing: it keeps readers on Postgres until a warm clears it (Redis deletes the set
# when its last intent goes). The intent also marks the versions hash ("^<token>"): while
# the mark is there, Redis has kept every version raised since the intent (an eviction or
# a drop takes the whole hash), which is what lets the update after the commit start a
# fresh index (see the put scripts).
# KEYS[1] intents  KEYS[2] the thread's unflushed hash  KEYS[3] versions hash
# ARGV[1] token  ARGV[2] deadline (ms since epoch)  ARGV[3] ttl ms (0: none)
# ARGV[4] the written namespace's unflushed member prefix ("<b64 ns>:"; "": any)
# returns 1 if that namespace has write-behind entries not yet flushed, else 0
INTENT_SCRIPT = _PRELUDE + """
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('PERSIST', KEYS[1])
redis.call('HSET', KEYS[3], '^' .. ARGV[1], 1)
if tonumber(ARGV[3]) > 0 and redis.call('PTTL', KEYS[3]) == -1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return unflushed(KEYS[2], ARGV[4])
"""

# A sweep's claim on a thread before it deletes any of it: an intent, taken only while no
# live writer holds one and no write-behind entry of the thread waits for a flush. While it
# is held, reads go to Postgres and write-behind writes go through Postgres (see the put
# scripts), whose row locks order them with the sweep's transaction; a second sweeper
# finds the intent and leaves the thread alone. Released by the drop that follows.
# KEYS[1] intents  KEYS[2] the thread's unflushed hash  ARGV[1] token
# ARGV[2] deadline (ms since epoch)  ARGV[3] now (ms since epoch)
# returns 1 if claimed, 0 if the thread is busy
FENCE_SCRIPT = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('ZCOUNT', KEYS[1], ARGV[3], '+inf') > 0 then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('PERSIST', KEYS[1])
return 1
"""

# Shared body of the two put scripts: store one checkpoint and the blobs it introduces,
# then keep the namespace's hot history bounded: once it holds twice `keep` checkpoints,
# the oldest are dropped down to `keep` (never one with unflushed entries), with every
# blob version no remaining checkpoint refers to. Older checkpoints are read from Postgres.
#
# Write-through (after the Postgres commit): a write older than the thread's tombstone
# (the thread was deleted or invalidated after it committed) changes nothing, and so does
# one that cannot start a fresh index, unless Redis holds the namespace's index (a fresh
# index must start at the true head, also when only the index was evicted and the registry
# still lists it). Starting one takes a put committed as the head whose intent still
# stands, with its mark (Redis kept the thread's versions since), and no newer version of
# the namespace: an update that lands late (its writer stalled, or it was sent without
# waiting) after a newer put of another writer landed and the index was evicted must not
# bring back the older head. Either way the namespace's version rises to the committed
# one, so a warm built from a Postgres read before this commit is refused.
# Write-behind (the write itself): when ARGV[12] is "1" the checkpoint must extend the
# namespace's head: its parent (or itself, a retry) must be the latest id of the index.
# Replies {"conflict", head} if it is not, and {"cold"} when the index is not hot (a root
# too, unless a read found the namespace empty since Redis last heard of it: an index it
# started could hide a newer head Postgres holds) or a write-through write or a sweep of
# the thread is in flight (the caller then writes through Postgres, which knows the head;
# its intent tells it whether to drain the journal first).
# KEYS[1] intents  KEYS[2] index(ns)  KEYS[3] blobs(ns)  KEYS[4] checkpoint  KEYS[5] registry
# KEYS[6] the thread's unflushed hash  KEYS[7] the thread's versions hash
# ARGV[1] intent token or ""  ARGV[2] ttl ms (0: none, -1: keep until flushed)
# ARGV[3] checkpoint id  ARGV[4] frame  ARGV[5] metadata json  ARGV[6] parent id or ""
# ARGV[7] blob refs (json array of fields)  ARGV[8] keep (0: keep all)
# ARGV[9] unflushed member prefix ("<b64 ns>:")  ARGV[10] a new cache token "v"
# ARGV[11] committed version (write-through) or "0"
# ARGV[12] write-behind: "1" must extend the head; write-through: "h" committed as the head
# ARGV[13] versions field of the namespace  ARGV[14] n  ARGV[15 .. 14+2n] blob field, frame
_PUT_BODY = """
local ttl = tonumber(ARGV[2])
local n = tonumber(ARGV[14])
local version = tonumber(ARGV[11])
local prefix = string.sub(KEYS[4], 1, #KEYS[4] - #ARGV[3])
if version > 0 then
  -- a fresh index needs a put committed as the head whose intent still stands, and whose
  -- mark shows Redis kept the versions since: a Redis that lost the intent (emptied,
  -- restarted) also lost the versions of any put that committed after this one; one that
  -- kept them knows of any newer put that landed
  local newest, tomb = held(KEYS[7], ARGV[13])
  local marked = redis.call('HEXISTS', KEYS[7], '^' .. ARGV[1]) == 1
  local fresh = ARGV[12] == 'h' and redis.call('ZSCORE', KEYS[1], ARGV[1])
    and marked and version >= newest
  if version < tomb then
    clear_intent(KEYS[1], KEYS[7], ARGV[1])
    return 0
  end
  if not fresh and (redis.call('SISMEMBER', KEYS[5], KEYS[2]) == 0
                    or redis.call('EXISTS', KEYS[2]) == 0) then
    -- nothing to join: Redis still learns the version, so a warm read before this commit
    -- (a reader that missed after Redis lost the intent) is refused when it lands later.
    -- Without the intent's mark, Redis lost the versions since the intent (a drop of the
    -- thread, an eviction, a restart), a tombstone among them: '#' says so, and sends
    -- writes to a checkpoint Redis does not hold through Postgres, which knows
    raise_version(KEYS[7], ARGV[13], version)
    if not marked then redis.call('HSET', KEYS[7], '#', 1) end
    settle_versions(KEYS[7], ttl)
    clear_intent(KEYS[1], KEYS[7], ARGV[1])
    return 0
  end
end
-- write-behind while a write through Postgres (or a sweep) is in flight on the thread (its
-- intent): Postgres orders the two
if version == 0 then
  if redis.call('ZCARD', KEYS[1]) > 0 then return {'cold'} end
  if redis.call('SISMEMBER', KEYS[5], KEYS[2]) == 0 then
    -- a namespace Redis does not hold goes through Postgres, which knows its head (an
    -- index started here could hide a newer one), unless this is a root of a namespace a
    -- read found empty since Redis last heard of it (see KNOWN_EMPTY)
    if ARGV[12] ~= '0' or redis.call('HEXISTS', KEYS[7], '~' .. ARGV[13]) == 0
       or held(KEYS[7], ARGV[13]) > 0 then
      return {'cold'}
    end
    redis.call('HDEL', KEYS[7], '~' .. ARGV[13])
  else
    local last = redis.call('ZRANGE', KEYS[2], -1, -1)
    if #last == 0 then return {'cold'} end
    if ARGV[12] == '1' and last[1] ~= ARGV[6] and last[1] ~= ARGV[3] then
      return {'conflict', last[1]}
    end
  end
end
adopt(KEYS[5], KEYS[2], KEYS[3], prefix)
redis.call('HSET', KEYS[4], 'c', ARGV[4], 'm', ARGV[5], 'p', ARGV[6], 'bk', ARGV[7],
           'v', ARGV[10])
redis.call('ZADD', KEYS[2], 0, ARGV[3])
if n > 0 then redis.call('HSET', KEYS[3], unpack(ARGV, 15, 14 + 2 * n)) end
redis.call('SADD', KEYS[5], KEYS[2], KEYS[3], KEYS[4])
if version > 0 then raise_version(KEYS[7], ARGV[13], version) end
clear_intent(KEYS[1], KEYS[7], ARGV[1])
for i = 2, 5 do settle(KEYS[i], ttl) end
settle_versions(KEYS[7], ttl)
local keep = tonumber(ARGV[8])
local total = redis.call('ZCARD', KEYS[2])
-- unflushed checkpoints cannot go: trim only once enough flushed ones piled up
if keep > 0 and total - redis.call('HLEN', KEYS[6]) > 2 * keep then
  local needed = {}
  local function need(id)
    local bk = redis.call('HGET', prefix .. id, 'bk')
    if bk then for _, f in ipairs(cjson.decode(bk)) do needed[f] = true end end
  end
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], total - keep, -1)) do need(id) end
  local drop = {}
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, total - keep - 1)) do
    if redis.call('HEXISTS', KEYS[6], ARGV[9] .. id) == 1 then need(id)
    else drop[#drop + 1] = id end
  end
  for _, id in ipairs(drop) do
    local bk = redis.call('HGET', prefix .. id, 'bk')
    if bk then
      for _, f in ipairs(cjson.decode(bk)) do
        if not needed[f] then redis.call('HDEL', KEYS[3], f) end
      end
    end
    redis.call('DEL', prefix .. id)
    redis.call('SREM', KEYS[5], prefix .. id)
    redis.call('ZREM', KEYS[2], id)
  end
end
"""

# Write-through: the put above, after the Postgres commit; clears the writer's intent.
PUT_SCRIPT = _PRELUDE + _PUT_BODY + "return 1\n"

# Journal append shared by the write-behind scripts. Refuses when the journal is full
# (Postgres has been unreachable for a while), by entries or by payload bytes, before
# anything is written; counts the payload's bytes in the journal's byte counter.
# JKEY journal  BKEY byte counter  UKEY unflushed hash of the thread  A payload
# M unflushed member  X max entries  Y max bytes
_JOURNAL_CHECK = """
if redis.call('XLEN', {jkey}) >= tonumber({max}) then
  return redis.error_reply('BACKLOG the write-behind journal holds ' .. {max} ..
    ' entries Postgres has not taken yet')
end
local held_bytes = tonumber(redis.call('GET', {bkey}) or '0') or 0
if held_bytes > tonumber({max_bytes}) then
  return redis.error_reply('BACKLOG the write-behind journal holds ' .. held_bytes ..
    ' bytes Postgres has not taken yet (max_unflushed_bytes ' .. {max_bytes} .. ')')
end
"""
_JOURNAL_APPEND = """
redis.call('HINCRBY', {ukey}, {member}, 1)
redis.call('PERSIST', {ukey})
redis.call('INCRBY', {bkey}, string.len({payload}))
return redis.call('XADD', {jkey}, '*', 'd', {payload})
"""


def _journaled(
    body: str, *, count: str, stride: int, base: int, ukey: str, jkey: str, bkey: str
) -> str:
    """A write-behind script: ``body`` plus its journal entry, atomically.

    The entry's payload, unflushed member, entry bound and byte bound follow the body's own
    arguments: ``ARGV[j+1]`` .. ``ARGV[j+4]`` with ``j = base + stride * count``.
    A body that returns early (a refusal) appends nothing.
    """
    return (
        _PRELUDE
        + f"local j = {base} + {stride} * tonumber({count})\n"
        + _JOURNAL_CHECK.format(jkey=jkey, bkey=bkey, max="ARGV[j + 3]", max_bytes="ARGV[j + 4]")
        + body
        + _JOURNAL_APPEND.format(
            jkey=jkey, bkey=bkey, ukey=ukey, member="ARGV[j + 2]", payload="ARGV[j + 1]"
        )
    )


# Write-behind put: KEYS[8] journal  KEYS[9] its byte counter;
# ARGV[15+2n..18+2n] payload, member, entry bound, byte bound
PUT_BEHIND_SCRIPT = _journaled(
    _PUT_BODY, count="ARGV[14]", stride=2, base=14, ukey="KEYS[6]", jkey="KEYS[8]", bkey="KEYS[9]"
)

# Shared body of the two put_writes scripts: store pending writes of one checkpoint.
# LangGraph may save a task's writes before the checkpoint they belong to (durability
# "async"): they then wait in a hash without the checkpoint's fields, which reads treat as
# a miss until the put completes it.
# Write-through: a write older than the thread's tombstone changes nothing. Ordinary writes
# are first-write-wins; a special write replaces its field only when its committed version
# is newer than the field's own ("@<field>", set with it) or, for a field without one, than
# the version the checkpoint was warmed at ("@", set by WARM): updates are sent without
# waiting, so two concurrent writers' updates may land in either order, and the one that
# lands last must not undo the other's newer value, nor keep an older one of its own field.
# Write-behind: replies {"cold"} while a write through Postgres or a sweep of the thread
# is in flight (its intent), so Postgres orders the two; and for a namespace Redis does
# not hold of a thread it dropped (a tombstone): Postgres knows whether the checkpoint
# written to belongs to a deleted history, and refuses the write if so.
# KEYS[1] intents  KEYS[2] checkpoint  KEYS[3] registry  KEYS[4] the thread's unflushed hash
# KEYS[5] index(ns)  KEYS[6] blobs(ns)  KEYS[7] versions hash
# ARGV[1] intent token or ""  ARGV[2] ttl ms (0: none, -1: keep until flushed)
# ARGV[3] a new cache token "v"  ARGV[4] committed version or "0"  ARGV[5] versions field
# ARGV[6] n  ARGV[7 .. 6+3n] field, value, mode ("r": replace, "n": first write wins)
_PUT_WRITES_BODY = """
local ttl = tonumber(ARGV[2])
local n = tonumber(ARGV[6])
local version = tonumber(ARGV[4])
local function done()
  clear_intent(KEYS[1], KEYS[7], ARGV[1])
end
if version == 0 and redis.call('ZCARD', KEYS[1]) > 0 then return {'cold'} end
local _, tomb = held(KEYS[7], ARGV[5])
if version > 0 and version < tomb then done() return 0 end
-- writes for a checkpoint Redis does not hold, on a thread Redis dropped (its tombstone)
-- or whose versions it lost (the tombstone with them: '#', or no versions at all):
-- Postgres knows whether a delete removed that checkpoint, and refuses the writes then
if version == 0 and redis.call('EXISTS', KEYS[5]) == 0
   and (tomb > 0 or redis.call('EXISTS', KEYS[7]) == 0
        or redis.call('HEXISTS', KEYS[7], '#') == 1) then
  return {'cold'}
end
for i = 7, 6 + 3 * n, 3 do
  if ARGV[i + 2] ~= 'r' then redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1])
  elseif version == 0 then redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  else
    local at = '@' .. ARGV[i]
    local seen = redis.call('HGET', KEYS[2], at) or redis.call('HGET', KEYS[2], '@') or '0'
    if version > tonumber(seen) then
      redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1], at, version)
    end
  end
end
redis.call('HSET', KEYS[2], 'v', ARGV[3])
-- listed before its checkpoint comes (if ever), so a drop of the thread takes it too
redis.call('SADD', KEYS[3], KEYS[2])
if version > 0 then raise_version(KEYS[7], ARGV[5], version) end
done()
settle(KEYS[2], ttl)
for i = 5, 6 do settle(KEYS[i], ttl) end
settle_versions(KEYS[7], ttl)
settle(KEYS[3], ttl)
"""

PUT_WRITES_SCRIPT = _PRELUDE + _PUT_WRITES_BODY + "return 1\n"

# Write-behind put_writes: KEYS[8] journal  KEYS[9] its byte counter;
# ARGV[7+3n..10+3n] payload, member, entry bound, byte bound
PUT_WRITES_BEHIND_SCRIPT = _journaled(
    _PUT_WRITES_BODY,
    count="ARGV[6]",
    stride=3,
    base=6,
    ukey="KEYS[4]",
    jkey="KEYS[8]",
    bkey="KEYS[9]",
)

# Load the latest checkpoint of a namespace, read from Postgres, into Redis ("head" mode),
# or rewrite a damaged checkpoint the thread's copy already holds ("repair" mode, which
# never touches the index: a read by id must not create or move a head). Refused
# (returns 0) while a live writer is at work on the thread (its intent has not passed its
# deadline), while the thread has entries not yet flushed (Redis is newer than Postgres),
# when the copy read is older than one Redis has already seen (its version is below
# the namespace's version or the thread's tombstone), and in "head" mode when the warm
# ticket the read was handed has gone (Redis lost the versions hash since: see GET).
# Expired intents (writers that died) are cleared with the thread's whole copy (they may
# have left any namespace stale): the Postgres read that preceded this call saw whatever
# they committed.
# KEYS[1] intents  KEYS[2] index(ns)  KEYS[3] blobs(ns)  KEYS[4] checkpoint  KEYS[5] registry
# KEYS[6] unflushed hash  KEYS[7] versions hash
# ARGV[1] now ms  ARGV[2] ttl ms  ARGV[3] checkpoint id  ARGV[4] frame  ARGV[5] metadata
# ARGV[6] parent  ARGV[7] blob refs  ARGV[8] version read  ARGV[9] versions field
# ARGV[10] "head" or "repair"  ARGV[11] number of blob pairs n  ARGV[12] ticket
# ARGV[13 .. 12+2n] blob field, frame  ARGV[13+2n ..] write field, value (and "v", token)
# returns 1 if warmed, 0 if refused
WARM_SCRIPT = (
    _PRELUDE
    + """
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
"""
)

# Write-behind: a read of a namespace's latest checkpoint that missed in Redis found none
# in Postgres either. Marks the namespace known empty ("~<field>" in the versions hash), so
# the first root written behind may start its index in Redis. Refused (0) when anything
# may have happened to the namespace since the miss handed out its ticket: the ticket has
# gone (Redis lost the hash), a write-through write or sweep is in flight, entries of the
# namespace wait for a flush, the index is in the copy, or Redis knows a version or
# tombstone of it (a drop also takes the mark, with the hash).
# KEYS[1] intents  KEYS[2] registry  KEYS[3] unflushed hash  KEYS[4] versions hash
# KEYS[5] index(ns)  ARGV[1] ticket  ARGV[2] versions field of the namespace
# ARGV[3] its unflushed member prefix
# returns 1 if marked, 0 if refused
KNOWN_EMPTY_SCRIPT = _PRELUDE + """
if redis.call('HGET', KEYS[4], '!') ~= ARGV[1] then return 0 end
if redis.call('ZCARD', KEYS[1]) > 0 then return 0 end
if unflushed(KEYS[3], ARGV[3]) == 1 then return 0 end
if redis.call('SISMEMBER', KEYS[2], KEYS[5]) == 1 then return 0 end
if held(KEYS[4], ARGV[2]) > 0 then return 0 end
redis.call('HSET', KEYS[4], '~' .. ARGV[2], 1)
return 1
"""

# Drop every hot key of a thread and clear the caller's intent (if any), leaving a
# tombstone version: a copy read from Postgres before the change that caused the drop is
# older than it, so no write or warm can bring it back. The unflushed hash stays: it
# counts journal entries that are still on their way to Postgres.
# With ARGV[4] = "1" a thread that has entries not yet flushed is left alone (returns -1):
# its copy holds writes Postgres lacks, so the caller flushes first.
# KEYS[1] intents  KEYS[2] registry  KEYS[3] versions hash  KEYS[4] unflushed hash
# ARGV[1] intent token or ""  ARGV[2] tombstone version (0: none)  ARGV[3] ttl ms (0: none)
# ARGV[4] "1": refuse while unflushed
DROP_THREAD_SCRIPT = _PRELUDE + """
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
"""

# The highest stale mark (a Postgres sequence number) this Redis has applied, raised to
# ARGV[1] when that is larger. Lives with the data it describes: a Redis restored from an
# older snapshot also has an older mark, and a Redis without one (new, emptied, or the key
# evicted) has 0, so the marks after it are applied again.
# KEYS[1] marks key  ARGV[1] seq applied now, or "" to only read  returns the mark
MARKS_SCRIPT = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if ARGV[1] ~= '' and tonumber(ARGV[1]) > current then
  current = tonumber(ARGV[1])
  redis.call('SET', KEYS[1], ARGV[1])
end
return current
"""

# Hand a flusher a batch: its own entries not yet acknowledged (a failed commit), else
# entries another flusher took and left idle (it died), else new ones. Creates the
# consumer group on first use. A batch holds at most `count` entries and, past its first
# entry, at most `cap` payload bytes; entries are taken one at a time, so an entry that
# would overflow the batch stays pending for this consumer and leads the next batch. With
# nothing to hand out, removes consumers idle for `forget` ms that hold no entry (savers
# that closed or died).
# KEYS[1] journal  ARGV[1] group  ARGV[2] consumer  ARGV[3] count  ARGV[4] reclaim idle ms
# ARGV[5] cap (bytes)  ARGV[6] forget idle ms (0: never)
# returns {{id, {field, value, ...}}, ...}
FLUSH_READ_SCRIPT = """
redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
local count, cap = tonumber(ARGV[3]), tonumber(ARGV[5])
local out, total = {}, 0
-- adds an entry; false once the batch is full
local function take(entry)
  if not (entry and entry[2]) then return true end
  local size = 0
  for i = 2, #entry[2], 2 do size = size + string.len(entry[2][i]) end
  if #out > 0 and total + size > cap then return false end
  out[#out + 1] = entry
  total = total + size
  return #out < count and total < cap
end
for _, p in ipairs(redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', count, ARGV[2])) do
  local entry = redis.call('XRANGE', KEYS[1], p[1], p[1])[1]
  if not entry then redis.call('XACK', KEYS[1], ARGV[1], p[1])  -- deleted meanwhile
  elseif not take(entry) then break end
end
if #out > 0 then return out end
local cursor, more = '0-0', true
repeat
  local claimed = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[4], cursor,
                             'COUNT', 1)
  cursor = claimed[1]
  for _, entry in ipairs(claimed[2]) do more = take(entry) and more end
until cursor == '0-0' or not more
if #out > 0 then return out end
while more do
  local fresh = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1,
                           'STREAMS', KEYS[1], '>')
  if not fresh then break end
  more = take(fresh[1][2][1])
end
if #out == 0 and tonumber(ARGV[6]) > 0 then
  for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
    local info = {}
    for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
    if info['name'] ~= ARGV[2] and info['pending'] == 0
       and info['idle'] > tonumber(ARGV[6]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    end
  end
end
return out
"""

# After the batch committed in Postgres: move the entries Postgres rejected to the dead
# letters, acknowledge and delete every entry of the batch (and take its bytes off the
# journal's count), give a thread whose last unflushed entry this was its TTL back on
# every key, and raise each namespace's version to the one the flush committed (a copy
# read before it is older).
# KEYS[1] journal  KEYS[2] dead letters  KEYS[3] journal byte counter
# ARGV[1] group  ARGV[2] ttl ms  ARGV[3] n entries  ARGV[4] m rejected entries
# ARGV[5 .. 4+5n] entry id, unflushed hash key, member, registry key, payload bytes
# ARGV[5+5n .. 4+5n+2m] rejected entry id, reason (two per rejected entry)
# ARGV[5+5n+2m ..] versions hash key, field, version (three per namespace flushed)
FLUSH_ACK_SCRIPT = _PRELUDE + """
local ttl = tonumber(ARGV[2])
local last = 4 + 5 * tonumber(ARGV[3])
local rejected = last + 2 * tonumber(ARGV[4])
for i = last + 1, rejected, 2 do
  local entry = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])[1]
  if entry then
    local fields = {}
    for k = 1, #entry[2] do fields[k] = entry[2][k] end
    fields[#fields + 1] = 'entry'
    fields[#fields + 1] = ARGV[i]
    fields[#fields + 1] = 'reason'
    fields[#fields + 1] = ARGV[i + 1]
    redis.call('XADD', KEYS[2], '*', unpack(fields))
  end
end
local settled = {}
local lost = {}
for i = 5, last, 5 do
  local id, ukey, member, registry = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if redis.call('XACK', KEYS[1], ARGV[1], id) == 1 then
    if redis.call('XDEL', KEYS[1], id) == 1 then
      redis.call('DECRBY', KEYS[3], ARGV[i + 4])
    end
    if redis.call('HINCRBY', ukey, member, -1) <= 0 then redis.call('HDEL', ukey, member) end
  else
    -- no longer pending here: Redis lost the journal (and this entry's hot copy) while
    -- the batch was committed, or another flusher took it over; the thread's copy may
    -- lack what just reached Postgres, so it goes (reads re-warm it)
    lost[registry] = true
  end
  if redis.call('EXISTS', ukey) == 0 and not settled[registry] then
    settled[registry] = true
    if ttl > 0 then
      local keys = redis.call('SMEMBERS', registry)
      for _, key in ipairs(keys) do redis.call('PEXPIRE', key, ttl) end
      redis.call('PEXPIRE', registry, ttl)
    end
  end
end
for registry in pairs(lost) do drop_copy(registry) end
if redis.call('XLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[3]) end
for i = rejected + 1, #ARGV, 3 do
  raise_version(ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]))
  if ttl > 0 then redis.call('PEXPIRE', ARGV[i], ttl) end
end
return 1
"""

# The journal's oldest and newest entry ids, its length and payload bytes, and how many
# dead letters wait.
# KEYS[1] journal  KEYS[2] byte counter  KEYS[3] dead letters (both optional: a probe
# passes the journal alone)
# returns {oldest id or "", newest id or "", length, bytes, dead letters}
JOURNAL_STATE_SCRIPT = """
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local size, dead = 0, 0
if #KEYS == 3 then
  size = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  dead = redis.call('XLEN', KEYS[3])
end
return {first[1] and first[1][1] or '', last[1] and last[1][1] or '',
        redis.call('XLEN', KEYS[1]), size, dead}
"""

# A closing saver leaves the consumer group, unless it still holds entries (they wait
# for another flusher to reclaim them).
# KEYS[1] journal  ARGV[1] group  ARGV[2] consumer  returns 1 if it left
JOURNAL_LEAVE_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if pending['err'] or #pending > 0 then return 0 end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) >= 0 and 1 or 0
"""

# Dead letters, oldest first.
# KEYS[1] dead letters  ARGV[1] first id ("-" for the oldest)  ARGV[2] count
# returns {{id, {field, value, ...}}, ...}
DEAD_LETTERS_SCRIPT = """
return redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
"""

# Put a dead letter back on the journal (after the cause was fixed) or drop it.
# KEYS[1] dead letters  KEYS[2] journal  KEYS[3] journal byte counter
# KEYS[4] the entry's thread's unflushed hash
# ARGV[1] dead letter id  ARGV[2] "retry" or "drop"  ARGV[3] unflushed member
# returns the new journal entry id (retry), "dropped", or "" if there is no such letter
DEAD_LETTER_SCRIPT = """
local entry = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1]
if not entry then return '' end
redis.call('XDEL', KEYS[1], ARGV[1])
if ARGV[2] == 'drop' then return 'dropped' end
local payload
for i = 1, #entry[2], 2 do
  if entry[2][i] == 'd' then payload = entry[2][i + 1] end
end
redis.call('HINCRBY', KEYS[4], ARGV[3], 1)
redis.call('PERSIST', KEYS[4])
redis.call('INCRBY', KEYS[3], string.len(payload))
return redis.call('XADD', KEYS[2], '*', 'd', payload)
"""

# Every checkpoint of a thread that has unflushed entries, in GET's reply format, after a
# first element that is 1 when Redis holds all of them, 0 when some checkpoint with
# unflushed entries has no hot copy (dropped, or expired while only writes wait): the
# caller then drains the thread's entries and reads Postgres.
# KEYS[1] the thread's unflushed hash  ARGV[1] thread key base
# returns {complete, {ns, id, field, value, ..., "\0blobs", ...}, ...}
LIST_UNFLUSHED_SCRIPT = """
local out = {1}
for _, member in ipairs(redis.call('HKEYS', KEYS[1])) do
  local sep = string.find(member, ':', 1, true)
  local ns, id = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
  local h = redis.call('HGETALL', ARGV[1] .. ':c:' .. member)
  local refs = nil
  for i = 1, #h, 2 do if h[i] == 'bk' then refs = h[i + 1] end end
  if refs ~= nil then
    local rec = {ns, id}
    for i = 1, #h do rec[#rec + 1] = h[i] end
    rec[#rec + 1] = '\\0blobs'
    local fields = cjson.decode(refs)
    if #fields > 0 then
      local values = redis.call('HMGET', ARGV[1] .. ':b:' .. ns, unpack(fields))
      for i = 1, #fields do
        if values[i] then
          rec[#rec + 1] = fields[i]
          rec[#rec + 1] = values[i]
        end
      end
    end
    out[#out + 1] = rec
  else
    out[1] = 0
  end
end
return out
"""
