-- Write-through: store pending writes after their Postgres commit, and clear the writer's
-- intent. Keys, arguments and replies: includes/put_writes.lua.
--
-- returns 1 when written, 0 when the write changed nothing, {COLD}
--!include prelude.lua
--!include replies
--!include put_writes.lua
return write_through() or 1
