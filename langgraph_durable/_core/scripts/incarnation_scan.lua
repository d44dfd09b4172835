-- One step of a SCAN over the prefix's keys, while a Redis process's data is checked
-- against Postgres (`hot.check_redis`): the keys that name a thread's copy (a registry or
-- a versions hash, ending in ":k" or ":v") are returned for the caller to drop; the
-- long-term store's cached items (under store_prefix) are deleted here, Postgres holds
-- them. Extends the caller's lock; a caller whose lock was taken over gets nothing back
-- and stops. On a single node only: the keys it deletes are not declared.
--
-- KEYS[1] lock           held by the caller (`incarnation.lua`)
-- ARGV[1] token          the caller's lock token
-- ARGV[2] lease          ms
-- ARGV[3] cursor         "0" to start
-- ARGV[4] pattern        the prefix's keys (a MATCH pattern)
-- ARGV[5] count          keys to look at
-- ARGV[6] store_prefix   what the store's cached items start with
--
-- returns {next cursor ("0": done), thread keys...}, or {} if the lock is not the caller's
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local step = redis.call('SCAN', ARGV[3], 'MATCH', ARGV[4], 'COUNT', ARGV[5])
local reply = {step[1]}
local store = ARGV[6]
for _, key in ipairs(step[2]) do
  local kind = string.sub(key, -2)
  if string.sub(key, 1, #store) == store then
    redis.call('DEL', key)
  elseif kind == ':k' or kind == ':v' then
    reply[#reply + 1] = key
  end
end
return reply
