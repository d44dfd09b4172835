-- Write-through: store a checkpoint after its Postgres commit, and clear the writer's
-- intent. Keys, arguments and replies: includes/put.lua.
--
-- returns 1 when written, 0 when the write changed nothing, {COLD} | {CONFLICT, head}
--!include prelude.lua
--!include replies
--!include put.lua
return write_through() or 1
