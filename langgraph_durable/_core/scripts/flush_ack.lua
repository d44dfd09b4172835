-- After the batch committed in Postgres: move the entries Postgres rejected to the dead
-- letters, acknowledge and delete every entry of the batch (and take its bytes off the
-- journal's count), give a thread whose last unflushed entry this was its TTL back on
-- every key, and raise each namespace's version to the one the flush committed (a copy
-- read before it is older).
--
-- KEYS[1] journal             the shard's journal
-- KEYS[2] dead                its dead letters
-- KEYS[3] journal_bytes       its byte counter
-- ARGV[1] group               the consumer group
-- ARGV[2] ttl                 ms (0: none)
-- ARGV[3] n                   entries in the batch
-- ARGV[4] m                   entries Postgres rejected
-- ARGV[5..4+5n] entries...    entry id, unflushed hash key, member, registry key, payload
--                             bytes (five per entry)
-- ARGV[5+5n..] rejected...    entry id, reason (two per rejected entry)
-- ARGV[5+5n+2m..] versions... versions hash key, field, version (three per namespace
--                             flushed)
--
-- returns 1
--!include prelude.lua
local ttl = tonumber(ARGV[2])
local last = 4 + 5 * tonumber(ARGV[3])
local rejected = last + 2 * tonumber(ARGV[4])
for i = last + 1, rejected, 2 do
  local entry = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])[1]
  if entry then
    local fields = {}
    for k = 1, #entry[2] do fields[k] = entry[2][k] end
    fields[#fields + 1] = 'entry'
    fields[#fields + 1] = ARGV[i]
    fields[#fields + 1] = 'reason'
    fields[#fields + 1] = ARGV[i + 1]
    redis.call('XADD', KEYS[2], '*', unpack(fields))
  end
end
local settled = {}
local lost = {}
for i = 5, last, 5 do
  local id, ukey, member, registry = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if redis.call('XACK', KEYS[1], ARGV[1], id) == 1 then
    if redis.call('XDEL', KEYS[1], id) == 1 then
      redis.call('DECRBY', KEYS[3], ARGV[i + 4])
    end
    if redis.call('HINCRBY', ukey, member, -1) <= 0 then redis.call('HDEL', ukey, member) end
  else
    -- no longer pending here: Redis lost the journal (and this entry's hot copy) while
    -- the batch was committed, or another flusher took it over; the thread's copy may
    -- lack what just reached Postgres, so it goes (reads re-warm it)
    lost[registry] = true
  end
  if redis.call('EXISTS', ukey) == 0 and not settled[registry] then
    settled[registry] = true
    if ttl > 0 then
      local keys = redis.call('SMEMBERS', registry)
      for _, key in ipairs(keys) do redis.call('PEXPIRE', key, ttl) end
      redis.call('PEXPIRE', registry, ttl)
    end
  end
end
for registry in pairs(lost) do drop_copy(registry) end
if redis.call('XLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[3]) end
for i = rejected + 1, #ARGV, 3 do
  raise_version(ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]))
  if ttl > 0 then redis.call('PEXPIRE', ARGV[i], ttl) end
end
return 1
