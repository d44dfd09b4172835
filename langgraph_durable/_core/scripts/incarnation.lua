-- Whether the data of this Redis process was checked against Postgres since it started:
-- the prefix's incarnation key holds the run id of the process that was checked. Redis
-- gives every process a new run id, so a snapshot it loads at a restart, or a replica it
-- was promoted from, never holds the id of the process that serves it (see
-- `hot.check_redis`).
--
-- mode "check": 1 if this process was checked; else 0 with the lock taken for the caller
-- (for lease ms), or -1 while another caller holds it.
-- mode "done": records the process as checked and releases the caller's lock; 1.
-- mode "abandon": releases the caller's lock (its check failed midway); 1.
--
-- KEYS[1] incarnation   the prefix's incarnation key
-- KEYS[2] lock          held by the caller that checks
-- ARGV[1] mode          "check", "done" or "abandon"
-- ARGV[2] run_id        the run id of the Redis process
-- ARGV[3] token         the caller's lock token
-- ARGV[4] lease         ms
--
-- returns 1, 0 or -1 (see above)
if ARGV[1] ~= 'check' then
  if ARGV[1] == 'done' then redis.call('SET', KEYS[1], ARGV[2]) end
  if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[2] then return 1 end
if redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[4]) then return 0 end
return -1
