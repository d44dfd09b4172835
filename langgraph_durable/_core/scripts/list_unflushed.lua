-- Every checkpoint of a thread that has unflushed entries, in get.lua's hit format, after
-- a first element that is 1 when Redis holds all of them, 0 when some checkpoint with
-- unflushed entries has no hot copy (a late flush acknowledgement dropped the thread's
-- copy, or it expired while only writes wait): the caller then drains the thread's
-- entries and reads Postgres. A member of the unflushed hash is "<b64 ns>:<id>" (`ThreadKeys.unflushed_member`): the
-- checkpoint's key is checkpoints followed by the member, the namespace's blob hash
-- blobs followed by "<b64 ns>" (`ThreadKeys.checkpoint`, `ThreadKeys.blobs`).
--
-- KEYS[1] unflushed     the thread's unflushed hash
-- ARGV[1] checkpoints   the thread's checkpoint key prefix
-- ARGV[2] blobs         the thread's blob hash key prefix
--
-- returns {complete, {"<b64 ns>", id, field, value, ..., BLOBS, blob field, frame, ...}, ...}
--!include replies
local out = {1}
for _, member in ipairs(redis.call('HKEYS', KEYS[1])) do
  local sep = string.find(member, ':', 1, true)
  local ns, id = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
  local h = redis.call('HGETALL', ARGV[1] .. member)
  local refs = nil
  for i = 1, #h, 2 do if h[i] == 'bk' then refs = h[i + 1] end end
  if refs ~= nil then
    local rec = {ns, id}
    for i = 1, #h do rec[#rec + 1] = h[i] end
    rec[#rec + 1] = BLOBS
    local fields = cjson.decode(refs)
    if #fields > 0 then
      local values = redis.call('HMGET', ARGV[2] .. ns, unpack(fields))
      for i = 1, #fields do
        if values[i] then
          rec[#rec + 1] = fields[i]
          rec[#rec + 1] = values[i]
        end
      end
    end
    out[#out + 1] = rec
  else
    out[1] = 0
  end
end
return out
