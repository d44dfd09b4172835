-- The journal's oldest and newest entry ids, its length and payload bytes, and how many
-- dead letters wait.
--
-- KEYS[1] journal         the shard's journal
-- KEYS[2] journal_bytes   its byte counter
-- KEYS[3] dead            its dead letters
--
-- returns {oldest id or "", newest id or "", length, bytes, dead letters}
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local size = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local dead = redis.call('XLEN', KEYS[3])
return {first[1] and first[1][1] or '', last[1] and last[1][1] or '',
        redis.call('XLEN', KEYS[1]), size, dead}
