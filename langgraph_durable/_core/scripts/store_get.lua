-- A long-term memory item's cached row (`_core.store`): its version and data, unless a
-- write to it is in flight (a hold) or no row is cached (nothing, a TTL item's or a
-- deletion's entry). On a miss the read's ticket is kept in the entry, for its fill
-- (`store_fill`): a write's hold takes it, and so does the entry going (expiry, eviction,
-- a restarted Redis's check), so a fill of a row read before either never lands.
--
-- KEYS[1] entry       the item's hash: v version, d data, h holds in flight, t ticket
-- ARGV[1] ticket      this read's ticket
-- ARGV[2] lease_ms    how long an entry made for the ticket alone lives
--
-- returns {version, data}, or false
local e = redis.call('HMGET', KEYS[1], 'v', 'd', 'h')
if e[3] and tonumber(e[3]) > 0 then return false end
if e[1] and e[2] and e[2] ~= '' and e[2] ~= '-' then return {e[1], e[2]} end
if redis.call('HSET', KEYS[1], 't', ARGV[1]) == 1 and not e[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return false
