-- Functions the scripts share.
local function refresh(key, ttl)
  if ttl > 0 and redis.call('PTTL', key) > 0 then redis.call('PEXPIRE', key, ttl) end
end
local function settle(key, ttl)
  if ttl < 0 then redis.call('PERSIST', key)
  elseif ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end
-- The thread's tombstone (set when the thread was dropped), or 0.
local function tombstone(vkey)
  return tonumber(redis.call('HGET', vkey, '*') or '0') or 0
end
-- The newest version of a namespace's copy Redis has seen: its own, or the thread's
-- tombstone, whichever is larger.
local function held(vkey, field)
  local own = tonumber(redis.call('HGET', vkey, field) or '0') or 0
  local tomb = tombstone(vkey)
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
-- Leave a namespace to Postgres when its copy ends before checkpoint `id`, one Postgres
-- holds: Redis lost it (a node restored from an older AOF, a replica promoted before it
-- got the update), or its put's update is still on its way. Out of the registry, the
-- namespace's keys are a miss: the next read warms it from Postgres, and a put that starts
-- a fresh index replaces them (`adopt`). A put on its way is then not joined (its version
-- is below the one that came first, see put.lua), and reads go to Postgres until the next
-- put: a cost, never a stale read. Returns 1 when it left the namespace.
local function leave_if_behind(registry, index, id)
  local last = redis.call('ZRANGE', index, -1, -1)
  if #last == 0 or last[1] >= id then return 0 end
  return redis.call('SREM', registry, index)
end
