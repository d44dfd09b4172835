-- The journal entry of a write-behind script, appended atomically with its write.
-- Refuses when the journal is full (Postgres has been unreachable for a while), by entries
-- or by payload bytes, before anything is written; a write that refuses (returns a reply)
-- appends nothing. Counts the payload's bytes in the journal's byte counter. The unflushed
-- hash never has a TTL (no script gives it one), so nothing here removes one.
-- The entry's arguments follow the write's own: ARGV[j+1] payload, ARGV[j+2] unflushed
-- member, ARGV[j+3] bound in entries, ARGV[j+4] bound in payload bytes.
-- Returns {BACKLOG, entries, bytes} (what the journal holds) when full, the write's
-- refusal, or the new entry's id.
local function journaled(write, j, journal, journal_bytes, unflushed)
  local entries = redis.call('XLEN', journal)
  local held_bytes = tonumber(redis.call('GET', journal_bytes) or '0') or 0
  if entries >= tonumber(ARGV[j + 3]) or held_bytes > tonumber(ARGV[j + 4]) then
    return {BACKLOG, entries, held_bytes}
  end
  local refused = write()
  if refused ~= nil then return refused end
  redis.call('HINCRBY', unflushed, ARGV[j + 2], 1)
  redis.call('INCRBY', journal_bytes, string.len(ARGV[j + 1]))
  return redis.call('XADD', journal, '*', 'd', ARGV[j + 1])
end
