-- Dead letters, oldest first.
--
-- KEYS[1] dead    the shard's dead letters
-- ARGV[1] first   the first id ("-" for the oldest)
-- ARGV[2] count   letters at most
--
-- returns {{id, {field, value, ...}}, ...}
return redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
