"""The hot tier's protocol: one Lua file per script (each runs atomically), the registry
that reads them (`registry`), and the builders and parsers of their calls (`thread`,
`shards`).

Every script touches keys of one hash slot. Thread scripts touch only keys under the
thread's hash tag. The write-behind scripts also append to the flush journal: on a single
node with one journal it is a key of its own; with journal shards (always on a Redis
Cluster) the thread's keys carry its shard's tag, beside the shard's journal, so the
script stays on one slot (see `keys.Layout` and docs/failure-model.md).

TTL rule: a write-behind write PERSISTs what it touches until the flusher has moved it
to Postgres; reads extend a TTL but never add one (``refresh``), so an unflushed key cannot
expire. No PERSIST is spent on a key that cannot have a TTL: the unflushed hash (no script
gives it one) and a checkpoint hash the write itself made.
"""
