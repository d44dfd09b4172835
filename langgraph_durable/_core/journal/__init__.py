"""Write-behind: journal entries and the flush, as sans-I/O operations.

A write-behind ``put``/``put_writes`` updates the thread's hot keys and appends one entry
to the journal (a Redis Stream) in a single script; a flusher moves the entries to Postgres
and only then acknowledges and deletes them. A sharded layout has one journal per shard.

`entries` (what an entry is: packed, sealed, decoded, ordered) ← `policy` (the flush
policy: a batch's rows and statements) and `state` (the journal's state over its shards,
the consumer group's membership) ← `flushing` (moving entries to Postgres, a rejected one
to the dead letters) and `letters` (the dead letters, listed, retried or dropped).
"""

from langgraph_durable._core.journal.entries import (
    GROUP,
    Entry,
    pack_checkpoint_entry,
    pack_writes_entry,
    seal_entry,
    stream_order,
)
from langgraph_durable._core.journal.flushing import (
    FORGET_CONSUMER_AFTER,
    Rejected,
    flush,
    flush_batch,
)
from langgraph_durable._core.journal.letters import (
    DeadLetter,
    dead_letters,
    resolve_dead_letter,
)
from langgraph_durable._core.journal.policy import CheckpointKey
from langgraph_durable._core.journal.state import (
    JournalState,
    each_shard,
    journal_state,
    leave_request,
    probe_request,
)

__all__ = [
    "FORGET_CONSUMER_AFTER",
    "GROUP",
    "CheckpointKey",
    "DeadLetter",
    "Entry",
    "JournalState",
    "Rejected",
    "dead_letters",
    "each_shard",
    "flush",
    "flush_batch",
    "journal_state",
    "leave_request",
    "pack_checkpoint_entry",
    "pack_writes_entry",
    "probe_request",
    "resolve_dead_letter",
    "seal_entry",
    "stream_order",
]
