-- The write of put.lua (write-through, `write_through`) and put_behind.lua (write-behind,
-- `write_behind`): store one checkpoint and the blobs it introduces (`store`), then keep
-- the namespace's hot history bounded: once it holds twice `keep` checkpoints, the oldest
-- are dropped down to `keep` (never one with unflushed entries), with every blob version no
-- remaining checkpoint refers to. Older checkpoints are read from Postgres. Each write
-- returns nothing once written, else the refusal to reply.
--
-- write_through (after the Postgres commit): a write older than the thread's tombstone
-- (the thread was deleted or invalidated after it committed) changes nothing, and so does
-- one that cannot start a fresh index, unless Redis holds the namespace's index (a fresh
-- index must start at the true head, also when only the index was evicted and the registry
-- still lists it). Starting one takes a put committed as the head whose intent still
-- stands, with its mark (Redis kept the thread's versions since), and no newer version of
-- the namespace: an update that lands late (its writer stalled, or it was sent without
-- waiting) after a newer put of another writer landed and the index was evicted must not
-- bring back the older head. Either way the namespace's version rises to the committed
-- one, so a warm built from a Postgres read before this commit is refused.
-- write_behind (the write itself): when head is "1" the checkpoint must extend the
-- namespace's head: its parent (or itself, a retry) must be the latest id of the index.
-- A root with head "1" must find the namespace without a head. Replies {CONFLICT, head}
-- if it is not, and {COLD} (the caller then writes through Postgres, which knows the
-- head; its intent tells it whether to drain the journal first) when the index is not
-- hot (a root too, unless a read found the namespace empty since Redis last heard of it:
-- an index it started could hide a newer head Postgres holds), when a write-through write
-- or a sweep of the thread is in flight, or when the head it must extend was loaded by a
-- warm and no put landed on it since: the warm's Postgres read may predate a write
-- through Postgres whose intent Redis lost (emptied under the saver) before it landed.
-- The namespace's checkpoint key prefix is the checkpoint's key without its id.
--
-- KEYS[1] intents         the thread's write intents
-- KEYS[2] index           the namespace's checkpoint ids
-- KEYS[3] blobs           the namespace's blob hash
-- KEYS[4] checkpoint      the checkpoint's hash
-- KEYS[5] registry        the keys of the thread's copy
-- KEYS[6] unflushed       the thread's unflushed hash
-- KEYS[7] versions        the thread's versions hash
-- ARGV[1] token           the writer's intent token, or ""
-- ARGV[2] ttl             ms (0: none, -1: keep until flushed)
-- ARGV[3] checkpoint_id   the checkpoint's id
-- ARGV[4] frame           the checkpoint's frame
-- ARGV[5] metadata        its metadata (JSON)
-- ARGV[6] parent          its parent's id, or ""
-- ARGV[7] refs            its blob fields (a JSON array)
-- ARGV[8] keep            checkpoints kept hot per namespace (0: all)
-- ARGV[9] member_prefix   the namespace's unflushed member prefix ("<b64 ns>:")
-- ARGV[10] token_v        a new cache token "v"
-- ARGV[11] version        write_through: the committed version; write_behind: "0"
-- ARGV[12] head           write_through: "1" when committed as the head, else "0";
--                         write_behind: "1" when it must extend the head, else "0"
-- ARGV[13] field          the namespace's field in the versions hash
-- ARGV[14] writes         write_through: "1" when Postgres holds pending writes of the
--                         checkpoint (they came first), else "0"; write_behind: "0"
-- ARGV[15] n              number of blob pairs
-- ARGV[16..15+2n] blob_pairs...   blob field, frame
-- Store the checkpoint (an admitted write); ``version``: the committed one, or 0.
local function store(version)
  local ttl = tonumber(ARGV[2])
  local n = tonumber(ARGV[15])
  local prefix = string.sub(KEYS[4], 1, #KEYS[4] - #ARGV[3])
  adopt(KEYS[5], KEYS[2], KEYS[3], prefix)
  -- all five fields new: this HSET made the hash (every writer of a checkpoint sets "v")
  local made = redis.call('HSET', KEYS[4], 'c', ARGV[4], 'm', ARGV[5], 'p', ARGV[6],
                          'bk', ARGV[7], 'v', ARGV[10]) == 5
  -- a hash that was there (writes came first, a retry, a warm) may hold more than this
  -- write: its token is one the writer does not know, so its decoded cache does not serve it
  if not made then redis.call('HSET', KEYS[4], 'v', ARGV[10] .. '+') end
  redis.call('ZADD', KEYS[2], 0, ARGV[3])
  if n > 0 then redis.call('HSET', KEYS[3], unpack(ARGV, 16, 15 + 2 * n)) end
  redis.call('SADD', KEYS[5], KEYS[2], KEYS[3], KEYS[4])
  if version > 0 then raise_version(KEYS[7], ARGV[13], version) end
  clear_intent(KEYS[1], KEYS[7], ARGV[1])
  settle(KEYS[2], ttl)
  settle(KEYS[3], ttl)
  if not made or ttl >= 0 then settle(KEYS[4], ttl) end  -- a hash just made has no TTL
  settle(KEYS[5], ttl)
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
end

local function write_through()
  local version = tonumber(ARGV[11])
  -- a fresh index needs a put committed as the head whose intent still stands, and whose
  -- mark shows Redis kept the versions since: a Redis that lost the intent (emptied,
  -- restarted) also lost the versions of any put that committed after this one; one that
  -- kept them knows of any newer put that landed
  local newest, tomb = held(KEYS[7], ARGV[13])
  local marked = redis.call('HEXISTS', KEYS[7], '^' .. ARGV[1]) == 1
  local fresh = ARGV[12] == '1' and redis.call('ZSCORE', KEYS[1], ARGV[1])
    and marked and version >= newest
  if version < tomb then
    clear_intent(KEYS[1], KEYS[7], ARGV[1])
    return 0
  end
  -- Postgres holds writes of this checkpoint (they came first) and Redis has no hash of
  -- it (it lost them, or never got them): stored here, the checkpoint would be served
  -- without them, so the namespace is left to a read from Postgres (out of the registry,
  -- its keys are a miss)
  local lacks_writes = ARGV[14] == '1' and redis.call('EXISTS', KEYS[4]) == 0
  if lacks_writes then redis.call('SREM', KEYS[5], KEYS[2]) end
  if lacks_writes or (not fresh and (redis.call('SISMEMBER', KEYS[5], KEYS[2]) == 0
                                     or redis.call('EXISTS', KEYS[2]) == 0)) then
    -- nothing to join: Redis still learns the version, so a warm read before this commit
    -- (a reader that missed after Redis lost the intent) is refused when it lands later.
    -- Without the intent's mark, Redis lost the versions since the intent (a drop of the
    -- thread, an eviction, a restart), a tombstone among them: "#" says so, and sends
    -- writes-first to a namespace Redis does not hold through Postgres, which knows
    raise_version(KEYS[7], ARGV[13], version)
    if not marked then redis.call('HSET', KEYS[7], '#', 1) end
    settle_versions(KEYS[7], tonumber(ARGV[2]))
    clear_intent(KEYS[1], KEYS[7], ARGV[1])
    return 0
  end
  return store(version)
end

local function write_behind()
  -- a write through Postgres (or a sweep) is in flight on the thread (its intent):
  -- Postgres orders the two
  if redis.call('ZCARD', KEYS[1]) > 0 then return {COLD} end
  if redis.call('SISMEMBER', KEYS[5], KEYS[2]) == 0 then
    -- a namespace Redis does not hold goes through Postgres, which knows its head (an
    -- index started here could hide a newer one), unless this is a root of a namespace a
    -- read found empty since Redis last heard of it (see KNOWN_EMPTY): a root that must
    -- find no head yet finds none (a second such root finds the index this one starts)
    if (ARGV[12] == '1' and ARGV[6] ~= '')
       or redis.call('HEXISTS', KEYS[7], '~' .. ARGV[13]) == 0
       or held(KEYS[7], ARGV[13]) > 0 then
      return {COLD}
    end
    redis.call('HDEL', KEYS[7], '~' .. ARGV[13])
  else
    local last = redis.call('ZRANGE', KEYS[2], -1, -1)
    if #last == 0 then return {COLD} end
    if ARGV[12] == '1' and last[1] ~= ARGV[6] and last[1] ~= ARGV[3] then
      return {CONFLICT, last[1]}
    end
    -- a head a warm loaded ("@": the version it was read at) came from a Postgres read
    -- that a write through Postgres in flight may have passed, its intent lost with
    -- Redis's keys since: Postgres orders the first write that extends it
    if ARGV[12] == '1' and last[1] ~= ARGV[3] and redis.call(
        'HEXISTS', string.sub(KEYS[4], 1, #KEYS[4] - #ARGV[3]) .. last[1], '@') == 1 then
      return {COLD}
    end
  end
  return store(0)
end
