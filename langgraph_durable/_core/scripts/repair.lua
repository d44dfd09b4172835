-- Delete a key of the prefix that holds another type than the scripts keep there (another
-- client wrote it, so a script on it failed with WRONGTYPE), as if Redis had evicted it:
-- the scripts take a missing key for an evicted one (a read misses and goes to Postgres,
-- a write rebuilds it). A registry is checked with its members: the copy's index (a zset),
-- blob and checkpoint keys (hashes).
-- A thread's intents key is no copy: it held intents of writers that may have committed
-- and not updated Redis yet (their update may even have failed on this key), and no
-- eviction takes it. Replaced, it holds one intent with the latest deadline any of them
-- could have, so reads go to Postgres until then, and the warm after it drops the
-- thread's copy, as for a writer that died (warm.lua).
--
-- KEYS[1] key        a key the failed script was given
-- ARGV[1] expected   the type the scripts keep there ("hash", "zset", "set", ...)
-- ARGV[2] lost       for a thread's intents key: the standing intent's deadline (ms since
--                    epoch), else ""
--
-- returns key, type found, type expected, for each key deleted
local out = {}
local function check(key, expected)
  local found = redis.call('TYPE', key).ok
  if found ~= 'none' and found ~= expected then
    redis.call('DEL', key)
    out[#out + 1] = key
    out[#out + 1] = found
    out[#out + 1] = expected
  end
end
check(KEYS[1], ARGV[1])
if ARGV[2] ~= '' and #out > 0 then redis.call('ZADD', KEYS[1], ARGV[2], 'lost') end
if ARGV[1] == 'set' and redis.call('EXISTS', KEYS[1]) == 1 then
  local base = string.sub(KEYS[1], 1, -3)  -- the registry is <base>:k
  for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do
    if string.sub(member, #base + 1, #base + 3) == ':i:' then
      check(member, 'zset')
    else
      check(member, 'hash')
    end
  end
end
return out
