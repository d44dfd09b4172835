-- A long-term memory item's cached row (`_core.store`): its version and data, or nothing
-- while a write to it is in flight (a hold) or when nothing is cached.
--
-- KEYS[1] entry       the item's hash: v version, d data, h holds in flight
--
-- returns {version, data}, or false
local e = redis.call('HMGET', KEYS[1], 'v', 'd', 'h')
if not e[1] or (e[3] and tonumber(e[3]) > 0) then return false end
return {e[1], e[2]}
