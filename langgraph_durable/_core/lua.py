"""Lua scripts of the hot tier; each runs atomically.

Thread scripts touch only keys under the thread's hash tag. The write-behind scripts also
append to the flush journal, a key of its own: they need a single Redis node (or Valkey)
for that atomicity; see docs/failure-model.md.

TTL rule: a write-behind write PERSISTs what it touches until the flusher has moved it
to Postgres; reads extend a TTL but never add one (`refresh`), so an unflushed key cannot
expire.
"""

from __future__ import annotations

_PRELUDE = """
local function refresh(key, ttl)
  if ttl > 0 and redis.call('PTTL', key) > 0 then redis.call('PEXPIRE', key, ttl) end
end
local function settle(key, ttl)
  if ttl < 0 then redis.call('PERSIST', key)
  elseif ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end
"""

# Read one checkpoint (the latest of its namespace, or a given id) with its blobs and
# pending writes, in one round trip. A thread with any write intent is "busy": a write
# may have committed in Postgres and not reached Redis yet, so the caller reads Postgres.
# KEYS[1] intents  KEYS[2] index(ns)  KEYS[3] blobs(ns)  KEYS[4] registry
# ARGV[1] checkpoint key prefix  ARGV[2] checkpoint id or ""  ARGV[3] ttl ms (0: none)
# ARGV[4] id the caller holds decoded ("" if none)  ARGV[5] its version field "v"
# returns {"busy"} | {"miss"} | {"same", id} (the caller's copy is current)
#       | {"hit", id, field, value, ..., "\0blobs", field, frame, ...}
GET_SCRIPT = (
    _PRELUDE
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
if redis.call('ZCARD', KEYS[1]) > 0 then return {'busy'} end
local id = ARGV[2]
if id == '' then
  local last = redis.call('ZRANGE', KEYS[2], -1, -1)
  if #last == 0 then return {'miss'} end
  id = last[1]
end
local ttl = tonumber(ARGV[3])
local out
if id == ARGV[4] and ARGV[5] ~= '' and redis.call('HGET', ARGV[1] .. id, 'v') == ARGV[5] then
  out = {'same', id}
else
  out = record(ARGV[1] .. id, id)
  if out == nil then return {'miss'} end
end
refresh(ARGV[1] .. id, ttl)
for i = 2, 4 do refresh(KEYS[i], ttl) end
return out
"""
)

# Announce a write-through write before its Postgres transaction.
# KEYS[1] intents  ARGV[1] token  ARGV[2] deadline (ms since epoch)  ARGV[3] key ttl ms
INTENT_SCRIPT = """
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# Shared body of the two put scripts: store one checkpoint and the blobs it introduces,
# then keep the namespace's hot history bounded: once it holds twice `keep` checkpoints,
# the oldest are dropped down to `keep` (never one with unflushed entries), with every
# blob version no remaining checkpoint refers to. Older checkpoints are read from Postgres.
# KEYS[1] intents  KEYS[2] index(ns)  KEYS[3] blobs(ns)  KEYS[4] checkpoint  KEYS[5] registry
# KEYS[6] the thread's unflushed hash
# ARGV[1] intent token or ""  ARGV[2] ttl ms (0: none, -1: keep until flushed)
# ARGV[3] checkpoint id  ARGV[4] frame  ARGV[5] metadata json  ARGV[6] parent id or ""
# ARGV[7] blob refs (json array of fields)  ARGV[8] n  ARGV[9 .. 8+2n] blob field, frame
# ARGV[#ARGV-2] keep (0: keep all)  ARGV[#ARGV-1] unflushed member prefix ("<b64 ns>:")
# ARGV[#ARGV] a new version token "v" (decoded copies holding another one are stale)
_PUT_BODY = """
local ttl = tonumber(ARGV[2])
local n = tonumber(ARGV[8])
redis.call('HSET', KEYS[4], 'c', ARGV[4], 'm', ARGV[5], 'p', ARGV[6], 'bk', ARGV[7],
           'v', ARGV[#ARGV])
redis.call('ZADD', KEYS[2], 0, ARGV[3])
if n > 0 then redis.call('HSET', KEYS[3], unpack(ARGV, 9, 8 + 2 * n)) end
redis.call('SADD', KEYS[5], KEYS[2], KEYS[3], KEYS[4])
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
for i = 2, 5 do settle(KEYS[i], ttl) end
local keep = tonumber(ARGV[#ARGV - 2])
local total = redis.call('ZCARD', KEYS[2])
-- unflushed checkpoints cannot go: trim only once enough flushed ones piled up
if keep > 0 and total - redis.call('HLEN', KEYS[6]) > 2 * keep then
  local prefix = string.sub(KEYS[4], 1, #KEYS[4] - #ARGV[3])
  local needed = {}
  local function need(id)
    local bk = redis.call('HGET', prefix .. id, 'bk')
    if bk then for _, f in ipairs(cjson.decode(bk)) do needed[f] = true end end
  end
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], total - keep, -1)) do need(id) end
  local drop = {}
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, total - keep - 1)) do
    if redis.call('HEXISTS', KEYS[6], ARGV[#ARGV - 1] .. id) == 1 then need(id)
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
# (Postgres has been unreachable for a while), before anything is written.
# JKEY journal  UKEY unflushed hash of the thread  A payload  M unflushed member  X max
_JOURNAL_CHECK = """
if redis.call('XLEN', {jkey}) >= tonumber({max}) then
  return redis.error_reply('BACKLOG the write-behind journal holds ' .. {max} ..
    ' entries Postgres has not taken yet')
end
"""
_JOURNAL_APPEND = """
redis.call('HINCRBY', {ukey}, {member}, 1)
redis.call('PERSIST', {ukey})
return redis.call('XADD', {jkey}, '*', 'd', {payload})
"""


def _journaled(body: str, *, count: str, stride: int, base: int, ukey: str, jkey: str) -> str:
    """A write-behind script: ``body`` plus its journal entry, atomically.

    The entry's payload, unflushed member and journal bound follow the body's own
    arguments: ``ARGV[j+1]``, ``ARGV[j+2]``, ``ARGV[j+3]`` with ``j = base + stride * count``.
    """
    return (
        _PRELUDE
        + f"local j = {base} + {stride} * tonumber({count})\n"
        + _JOURNAL_CHECK.format(jkey=jkey, max="ARGV[j + 3]")
        + body
        + _JOURNAL_APPEND.format(jkey=jkey, ukey=ukey, member="ARGV[j + 2]", payload="ARGV[j + 1]")
    )


# Write-behind put: KEYS[7] journal; ARGV[9+2n..11+2n] payload, member, bound
PUT_BEHIND_SCRIPT = _journaled(
    _PUT_BODY, count="ARGV[8]", stride=2, base=8, ukey="KEYS[6]", jkey="KEYS[7]"
)

# Shared body of the two put_writes scripts: store pending writes of one checkpoint.
# KEYS[1] intents  KEYS[2] checkpoint  KEYS[3] registry  KEYS[4] the thread's unflushed hash
# ARGV[1] intent token or ""  ARGV[2] ttl ms (0: none, -1: keep until flushed)  ARGV[3] n
# ARGV[4 .. 3+3n] field, value, mode ("r": replace, "n": first write wins)
# ARGV[#ARGV] a new version token "v"
_PUT_WRITES_BODY = """
local ttl = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
for i = 4, 3 + 3 * n, 3 do
  if ARGV[i + 2] == 'r' then redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  else redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) end
end
redis.call('HSET', KEYS[2], 'v', ARGV[#ARGV])
redis.call('SADD', KEYS[3], KEYS[2])
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
settle(KEYS[2], ttl)
settle(KEYS[3], ttl)
"""

PUT_WRITES_SCRIPT = _PRELUDE + _PUT_WRITES_BODY + "return 1\n"

# Write-behind put_writes: KEYS[4] unflushed hash  KEYS[5] journal
# ARGV[4+3n..6+3n] payload, member, bound
PUT_WRITES_BEHIND_SCRIPT = _journaled(
    _PUT_WRITES_BODY, count="ARGV[3]", stride=3, base=3, ukey="KEYS[4]", jkey="KEYS[5]"
)

# Load a checkpoint read from Postgres back into Redis, unless a live writer is at work on
# the thread (its intent has not passed its deadline). Expired intents (writers that died)
# are cleared: the Postgres read that preceded this call saw whatever they committed.
# KEYS[1] intents  KEYS[2] index(ns)  KEYS[3] blobs(ns)  KEYS[4] checkpoint  KEYS[5] registry
# ARGV[1] now ms  ARGV[2] ttl ms  ARGV[3] checkpoint id  ARGV[4] frame  ARGV[5] metadata
# ARGV[6] parent  ARGV[7] blob refs  ARGV[8] number of blob pairs n
# ARGV[9 .. 8+2n] blob field, frame  ARGV[9+2n ..] write field, value (and "v", token)
# returns 1 if warmed, 0 if a live writer holds the thread
WARM_SCRIPT = (
    _PRELUDE
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) > 0 then return 0 end
local ttl = tonumber(ARGV[2])
local n = tonumber(ARGV[8])
local fresh = {}
for i = 2, 5 do fresh[i] = redis.call('EXISTS', KEYS[i]) == 0 end
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[4], 'c', ARGV[4], 'm', ARGV[5], 'p', ARGV[6], 'bk', ARGV[7])
if #ARGV > 8 + 2 * n then redis.call('HSET', KEYS[4], unpack(ARGV, 9 + 2 * n)) end
if n > 0 then redis.call('HSET', KEYS[3], unpack(ARGV, 9, 8 + 2 * n)) end
redis.call('ZADD', KEYS[2], 0, ARGV[3])
redis.call('SADD', KEYS[5], KEYS[2], KEYS[3], KEYS[4])
for i = 2, 5 do
  if fresh[i] or i == 4 then settle(KEYS[i], ttl) else refresh(KEYS[i], ttl) end
end
return 1
"""
)

# Drop every hot key of a thread and clear the caller's intent (if any).
# KEYS[1] intents  KEYS[2] registry  KEYS[3] unflushed hash  ARGV[1] intent token or ""
DROP_THREAD_SCRIPT = """
local keys = redis.call('SMEMBERS', KEYS[2])
for i = 1, #keys, 500 do
  redis.call('DEL', unpack(keys, i, math.min(i + 499, #keys)))
end
redis.call('DEL', KEYS[2], KEYS[3])
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
return #keys
"""

# Hand a flusher a batch: its own entries not yet acknowledged (a failed commit), else
# entries another flusher took and left idle (it died), else new ones. Creates the
# consumer group on first use.
# KEYS[1] journal  ARGV[1] group  ARGV[2] consumer  ARGV[3] count  ARGV[4] reclaim idle ms
# returns {{id, {field, value, ...}}, ...}
FLUSH_READ_SCRIPT = """
redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
local own = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                       'STREAMS', KEYS[1], '0')
if own and #own[1][2] > 0 then
  local out = {}
  for _, entry in ipairs(own[1][2]) do
    if entry and entry[2] then out[#out + 1] = entry end
  end
  if #out > 0 then return out end
end
local claimed = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[4], '0-0',
                           'COUNT', ARGV[3])
local out = {}
for _, entry in ipairs(claimed[2]) do
  if entry and entry[2] then out[#out + 1] = entry end
end
if #out > 0 then return out end
local fresh = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                         'STREAMS', KEYS[1], '>')
if not fresh then return {} end
return fresh[1][2]
"""

# After the batch committed in Postgres: acknowledge and delete its entries, and give a
# thread whose last unflushed entry this was its TTL back on every key.
# KEYS[1] journal  ARGV[1] group  ARGV[2] ttl ms
# ARGV[3..] entry id, unflushed hash key, member, registry key (four per entry)
FLUSH_ACK_SCRIPT = """
local ttl = tonumber(ARGV[2])
local settled = {}
for i = 3, #ARGV, 4 do
  local id, ukey, member, registry = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if redis.call('XACK', KEYS[1], ARGV[1], id) == 1 then
    redis.call('XDEL', KEYS[1], id)
    if redis.call('HINCRBY', ukey, member, -1) <= 0 then redis.call('HDEL', ukey, member) end
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
return 1
"""

# The journal's oldest and newest entry ids and its length.
# KEYS[1] journal  returns {oldest id or "", newest id or "", length}
JOURNAL_STATE_SCRIPT = """
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
return {first[1] and first[1][1] or '', last[1] and last[1][1] or '',
        redis.call('XLEN', KEYS[1])}
"""

# Every checkpoint of a thread that has unflushed entries, in GET's reply format.
# KEYS[1] the thread's unflushed hash  ARGV[1] thread key base
# returns {{"hit", id, field, value, ..., "\0blobs", ...}, ...} with the namespace first
LIST_UNFLUSHED_SCRIPT = """
local out = {}
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
  end
end
return out
"""
