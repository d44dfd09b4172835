"""Everything that does I/O for the core's operations.

`engine` runs operations for a saver (its context, clients and breaker probe); `sync` and
`aio` are the drivers that execute storage requests and hand tool effects to a callback
(line-by-line mirrors; `tests/test_driver_twins.py` checks that they differ only in
``async``/``await`` and the client classes they name); `host` asks the operating system
(process identity, pid liveness); `leases` keeps running tool calls' leases alive.
"""
