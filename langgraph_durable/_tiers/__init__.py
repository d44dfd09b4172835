"""Everything that does I/O for the core's operations.

`engine` runs operations for a saver (its context, clients and breaker probe); `sync` and
`aio` are the drivers that execute storage requests and hand tool effects to a callback
(`sync` is generated from `aio` by `scripts/unasync.py`, which ``--check`` keeps from
going stale); `host` asks the operating system (process identity, pid liveness); `leases`
keeps running tool calls' leases alive.
"""
