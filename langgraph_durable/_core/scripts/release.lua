-- Clear a write intent whose write committed nothing (the head had moved on), or a
-- sweep's claim.
--
-- KEYS[1] intents    the thread's write intents
-- KEYS[2] versions   the thread's versions hash
-- ARGV[1] token      the intent's token
--
-- returns 1
--!include prelude.lua
clear_intent(KEYS[1], KEYS[2], ARGV[1])
return 1
