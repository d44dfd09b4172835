-- The highest stale mark (a Postgres sequence number) this Redis has applied, raised to
-- seq when that is larger. Lives with the data it describes: a Redis restored from an
-- older snapshot also has an older mark, and a Redis without one (new, emptied, or the key
-- evicted) has 0, so the marks after it are applied again.
--
-- KEYS[1] marks   the shard's marks key
-- ARGV[1] seq     the mark applied now, or "" to only read
--
-- returns the mark
local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if ARGV[1] ~= '' and tonumber(ARGV[1]) > current then
  current = tonumber(ARGV[1])
  redis.call('SET', KEYS[1], ARGV[1])
end
return current
