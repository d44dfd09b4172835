-- The write of put_writes.lua (write-through, `write_through`) and put_writes_behind.lua
-- (write-behind, `write_behind`): store pending writes of one checkpoint (`store`). Each
-- write returns nothing once written, else the refusal to reply.
-- LangGraph may save a task's writes before the checkpoint they belong to (durability
-- "async"): they then wait in a hash without the checkpoint's fields, which reads treat as
-- a miss until the put completes it.
-- Write-through: a write older than the thread's tombstone changes nothing. Ordinary writes
-- are first-write-wins; a special write replaces its field only when its committed version
-- is newer than the field's own ("@<field>", set with it) or, for a field without one, than
-- the version the checkpoint was warmed at ("@", set by warm.lua): updates are sent without
-- waiting, so two concurrent writers' updates may land in either order, and the one that
-- lands last must not undo the other's newer value, nor keep an older one of its own field.
-- Write-behind: replies {COLD} while a write through Postgres or a sweep of the thread is
-- in flight (its intent), so Postgres orders the two; and for a namespace Redis does not
-- hold of a thread it dropped (a tombstone) or whose versions it lost since (put.lua's
-- "#" mark, or no versions hash at all; the tombstone went with them): Postgres knows
-- whether the checkpoint written to belongs to a deleted history, and refuses the write if
-- so.
--
-- KEYS[1] intents      the thread's write intents
-- KEYS[2] checkpoint   the checkpoint's hash
-- KEYS[3] registry     the keys of the thread's copy
-- KEYS[4] unflushed    the thread's unflushed hash
-- KEYS[5] index        the namespace's checkpoint ids
-- KEYS[6] blobs        the namespace's blob hash
-- KEYS[7] versions     the thread's versions hash
-- ARGV[1] token        the writer's intent token, or ""
-- ARGV[2] ttl          ms (0: none, -1: keep until flushed)
-- ARGV[3] token_v      a new cache token "v"
-- ARGV[4] version      write_through: the committed version; write_behind: "0"
-- ARGV[5] field        the namespace's field in the versions hash
-- ARGV[6] stored       write_through: the checkpoint's id when Postgres held it as the
--                      writes committed, else ""; write_behind: ""
-- ARGV[7] n            number of writes
-- ARGV[8..7+3n] writes...   field, value, mode ("r": replace, "n": first write wins)
-- Store the writes (an admitted write); ``version``: the committed one, or 0.
local function store(version)
  local ttl = tonumber(ARGV[2])
  local n = tonumber(ARGV[7])
  for i = 8, 7 + 3 * n, 3 do
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
  clear_intent(KEYS[1], KEYS[7], ARGV[1])
  settle(KEYS[2], ttl)
  for i = 5, 6 do settle(KEYS[i], ttl) end
  settle_versions(KEYS[7], ttl)
  settle(KEYS[3], ttl)
end

local function write_through()
  local version = tonumber(ARGV[4])
  if version < tombstone(KEYS[7]) then
    clear_intent(KEYS[1], KEYS[7], ARGV[1])
    return 0
  end
  -- a checkpoint Postgres holds, newer than any of the namespace Redis holds: Redis would
  -- serve an older head as the latest if it lost that checkpoint's put
  if ARGV[6] ~= '' then leave_if_behind(KEYS[3], KEYS[5], ARGV[6]) end
  if redis.call('HEXISTS', KEYS[7], '^' .. ARGV[1]) == 0
     and redis.call('SISMEMBER', KEYS[3], KEYS[2]) == 0 then
    -- the intent's mark is gone: Redis lost the thread's versions since the intent (a drop
    -- of the thread among them, whose delete may have removed these writes from Postgres
    -- after they committed), and holds no copy of the checkpoint to join: start none (as
    -- put.lua starts no index; a put of the checkpoint that finds Postgres holding writes
    -- Redis lacks leaves its namespace to a read from Postgres)
    raise_version(KEYS[7], ARGV[5], version)
    redis.call('HSET', KEYS[7], '#', 1)
    settle_versions(KEYS[7], tonumber(ARGV[2]))
    clear_intent(KEYS[1], KEYS[7], ARGV[1])
    return 0
  end
  return store(version)
end

local function write_behind()
  if redis.call('ZCARD', KEYS[1]) > 0 then return {COLD} end
  if redis.call('EXISTS', KEYS[5]) == 0
     and (tombstone(KEYS[7]) > 0 or redis.call('EXISTS', KEYS[7]) == 0
          or redis.call('HEXISTS', KEYS[7], '#') == 1) then
    return {COLD}
  end
  return store(0)
end
