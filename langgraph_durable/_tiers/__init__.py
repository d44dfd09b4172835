"""Everything that does I/O for the core's operations: two parts of docs/architecture.md.

The Engine: `engine` runs operations for a saver (its context, clients and breaker probe);
`host` asks the operating system (process identity, pid liveness); `leases` keeps running
tool calls' leases alive; `probes` are the operator tools' short-lived looks at the servers.

The Tiers: `sync` and `aio` are the drivers that execute storage requests and hand tool
effects to a callback (`sync` is generated from `aio` by `scripts/unasync.py`, which
``--check`` keeps from going stale); `clients`, `cluster` and `loop_pool` make the clients
they use; `common` is what both drivers share.
"""
