"""Lua scripts of the hot tier. Each runs atomically on the thread's hash slot.

Every key a script touches shares the thread's hash tag; keys a script derives (checkpoint
hashes named from a prefix) stay inside that tag, so the scripts run on Redis Cluster.
"""

from __future__ import annotations

# Read one checkpoint (the latest of its namespace, or a given id) with its blobs and
# pending writes, in one round trip. A thread with any write intent is "busy": a write
# may have committed in Postgres and not reached Redis yet, so the caller reads Postgres.
# KEYS[1] intents  KEYS[2] index(ns)  KEYS[3] blobs(ns)  KEYS[4] registry
# ARGV[1] checkpoint key prefix  ARGV[2] checkpoint id or ""  ARGV[3] ttl ms (0: none)
# returns {"busy"} | {"miss"} | {"hit", id, flat HGETALL..., "\0blobs", field, value, ...}
GET_SCRIPT = """
if redis.call('ZCARD', KEYS[1]) > 0 then return {'busy'} end
local id = ARGV[2]
if id == '' then
  local last = redis.call('ZRANGE', KEYS[2], -1, -1)
  if #last == 0 then return {'miss'} end
  id = last[1]
end
local key = ARGV[1] .. id
local h = redis.call('HGETALL', key)
local refs = nil
for i = 1, #h, 2 do
  if h[i] == 'bk' then refs = h[i + 1] end
end
if refs == nil then return {'miss'} end
local out = {'hit', id}
for i = 1, #h do out[#out + 1] = h[i] end
out[#out + 1] = '\\0blobs'
local fields = cjson.decode(refs)
if #fields > 0 then
  local values = redis.call('HMGET', KEYS[3], unpack(fields))
  for i = 1, #fields do
    if not values[i] then return {'miss'} end
    out[#out + 1] = fields[i]
    out[#out + 1] = values[i]
  end
end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('PEXPIRE', key, ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
  redis.call('PEXPIRE', KEYS[4], ttl)
end
return out
"""

# Announce a write-through write before its Postgres transaction.
# KEYS[1] intents  ARGV[1] token  ARGV[2] deadline (ms since epoch)  ARGV[3] key ttl ms
INTENT_SCRIPT = """
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# Store one checkpoint (and the blobs it introduces) and clear the writer's intent.
# KEYS[1] intents  KEYS[2] index(ns)  KEYS[3] blobs(ns)  KEYS[4] checkpoint  KEYS[5] registry
# ARGV[1] intent token or ""  ARGV[2] ttl ms (0: none, -1: persist)  ARGV[3] checkpoint id
# ARGV[4] checkpoint frame  ARGV[5] metadata json  ARGV[6] parent id or ""
# ARGV[7] blob refs (json array of fields)  ARGV[8..] blob field, frame, ...
PUT_SCRIPT = """
redis.call('HSET', KEYS[4], 'c', ARGV[4], 'm', ARGV[5], 'p', ARGV[6], 'bk', ARGV[7])
redis.call('ZADD', KEYS[2], 0, ARGV[3])
if #ARGV > 7 then redis.call('HSET', KEYS[3], unpack(ARGV, 8)) end
redis.call('SADD', KEYS[5], KEYS[2], KEYS[3], KEYS[4])
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
local ttl = tonumber(ARGV[2])
for i = 2, 5 do
  if ttl > 0 then redis.call('PEXPIRE', KEYS[i], ttl)
  elseif ttl < 0 and not (i == 3 and #ARGV <= 7) then redis.call('PERSIST', KEYS[i]) end
end
return 1
"""

# Store pending writes of one checkpoint and clear the writer's intent.
# KEYS[1] intents  KEYS[2] checkpoint  KEYS[3] registry
# ARGV[1] intent token or ""  ARGV[2] ttl ms (0: none, -1: persist)
# ARGV[3..] field, value, mode ("r": replace, "n": first write wins), ...
PUT_WRITES_SCRIPT = """
for i = 3, #ARGV, 3 do
  if ARGV[i + 2] == 'r' then redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  else redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) end
end
redis.call('SADD', KEYS[3], KEYS[2])
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
elseif ttl < 0 then
  redis.call('PERSIST', KEYS[2])
  redis.call('PERSIST', KEYS[3])
end
return 1
"""

# Load a checkpoint read from Postgres back into Redis, unless a live writer is at work on
# the thread (its intent has not passed its deadline). Expired intents (writers that died)
# are cleared: the Postgres read that preceded this call saw whatever they committed.
# KEYS[1] intents  KEYS[2] index(ns)  KEYS[3] blobs(ns)  KEYS[4] checkpoint  KEYS[5] registry
# ARGV[1] now ms  ARGV[2] ttl ms  ARGV[3] checkpoint id  ARGV[4] frame  ARGV[5] metadata
# ARGV[6] parent  ARGV[7] blob refs  ARGV[8] number of blob pairs n
# ARGV[9 .. 8+2n] blob field, frame  ARGV[9+2n ..] write field, value
# returns 1 if warmed, 0 if a live writer holds the thread
WARM_SCRIPT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) > 0 then return 0 end
local n = tonumber(ARGV[8])
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[4], 'c', ARGV[4], 'm', ARGV[5], 'p', ARGV[6], 'bk', ARGV[7])
if #ARGV > 8 + 2 * n then redis.call('HSET', KEYS[4], unpack(ARGV, 9 + 2 * n)) end
if n > 0 then redis.call('HSET', KEYS[3], unpack(ARGV, 9, 8 + 2 * n)) end
redis.call('ZADD', KEYS[2], 0, ARGV[3])
redis.call('SADD', KEYS[5], KEYS[2], KEYS[3], KEYS[4])
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  for i = 2, 5 do redis.call('PEXPIRE', KEYS[i], ttl) end
end
return 1
"""

# Drop every hot key of a thread and clear the caller's intent (if any).
# KEYS[1] intents  KEYS[2] registry  ARGV[1] intent token or ""
DROP_THREAD_SCRIPT = """
local keys = redis.call('SMEMBERS', KEYS[2])
for i = 1, #keys, 500 do
  redis.call('DEL', unpack(keys, i, math.min(i + 499, #keys)))
end
redis.call('DEL', KEYS[2])
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
return #keys
"""
