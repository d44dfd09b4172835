"""Every SQL statement of the tool-call ledger, and its migration.

Templates take a ``{schema}`` placeholder (rendered once per schema by `statements`);
parameters are named. Times come from the
database clock (``clock_timestamp()``), never the caller's, so leases mean the same thing
on every host.

A derived key is ``"lgd-" + sha256(f"{n}:{thread}|{n}:{ns}|{n}:{ref}|{n}:{checkpoint}")[:40]``
(the checkpoint part only for a call made in a graph task) where each ``n`` is the UTF-8
length of the part that follows it (see `_core.ledger.keys.derive_key`);
`COPY_THREAD_LEDGER_SQL` recomputes it in SQL for the target thread.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from psycopg import sql

from langgraph_durable._core.sql.render import Rendered
from langgraph_durable._core.sql.schema import Migration

TABLE = "lgd_tool_calls"

LEDGER_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        2,
        "tool-call ledger",
        """
CREATE TABLE {schema}.lgd_tool_calls (
    key              text PRIMARY KEY,
    thread_id        text NOT NULL,
    checkpoint_ns    text NOT NULL DEFAULT '',
    call_ref         text,
    tool_call_id     text,
    task_id          text,
    tool             text NOT NULL,
    args_fingerprint text NOT NULL,
    status           text NOT NULL
                     CHECK (status IN ('started', 'succeeded', 'failed', 'uncertain')),
    attempts         integer NOT NULL DEFAULT 1,
    result           bytea,
    error            text,
    error_type       text,
    retryable        boolean,
    lease_owner      text,
    lease_expires_at timestamptz,
    duplicate_of     text,
    started_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at      timestamptz
);
CREATE INDEX lgd_tool_calls_thread_idx ON {schema}.lgd_tool_calls (thread_id, started_at);
CREATE INDEX lgd_tool_calls_recent_idx
    ON {schema}.lgd_tool_calls (thread_id, tool, args_fingerprint, finished_at)
    WHERE status = 'succeeded';
""",
    ),
    Migration(
        4,
        "tool-call ledger: claim nonces",
        # NULL for rows claimed before: no retried claim takes them for its own.
        "ALTER TABLE {schema}.lgd_tool_calls ADD COLUMN claim_nonce text",
    ),
    Migration(
        7,
        "tool-call ledger: the key a fork's copy keeps for downstream",
        # NULL: the row's own key (every call that was not copied into a fork)
        "ALTER TABLE {schema}.lgd_tool_calls ADD COLUMN idempotency_key text",
    ),
    Migration(
        9,
        "tool-call ledger: the step a call ran in, to know a call re-run under a new key",
        # NULL: not known (a call made outside a LangGraph task, or claimed before)
        """
ALTER TABLE {schema}.lgd_tool_calls ADD COLUMN step integer;
CREATE INDEX lgd_tool_calls_step_idx ON {schema}.lgd_tool_calls (thread_id, step)
    WHERE step IS NOT NULL;
""",
    ),
    Migration(
        10,
        "tool-call ledger: the checkpoint that decided a call; rows kept of deleted threads",
        # checkpoint_id NULL: not known (outside a LangGraph task, or claimed before);
        # retired_at NULL: the row belongs to the thread's live conversation
        """
ALTER TABLE {schema}.lgd_tool_calls ADD COLUMN checkpoint_id text;
ALTER TABLE {schema}.lgd_tool_calls ADD COLUMN retired_at timestamptz;
CREATE INDEX lgd_tool_calls_ref_idx
    ON {schema}.lgd_tool_calls (thread_id, checkpoint_ns, call_ref);
""",
    ),
)

# What every statement that returns records returns, in `LedgerRecord` order, plus whether
# the lease has run out by the database's clock.
COLUMNS = (
    "key",
    "thread_id",
    "checkpoint_ns",
    "tool_call_id",
    "task_id",
    "tool",
    "args_fingerprint",
    "status",
    "attempts",
    "result",
    "error",
    "error_type",
    "retryable",
    "lease_owner",
    "lease_expires_at",
    "duplicate_of",
    "started_at",
    "finished_at",
    "checkpoint_id",
    "retired_at",
)
# The key passed downstream: a fork's copy keeps the original's, any other row its own.
_DOWNSTREAM = "COALESCE({t}idempotency_key, {t}key) AS idempotency_key"
_RECORD = (
    ", ".join(COLUMNS)
    + ", "
    + _DOWNSTREAM.format(t="")
    + ", (lease_expires_at IS NOT NULL AND lease_expires_at < clock_timestamp()) AS lease_expired"
)
_T_RECORD = (
    ", ".join(f"t.{c}" for c in COLUMNS)
    + ", "
    + _DOWNSTREAM.format(t="t.")
    + ", false AS lease_expired"
)

_LEASE = "clock_timestamp() + make_interval(secs => %(lease)s::float8)"

# Whether a row is the committed claim of this call's attempt ``{attempts}``: its nonce,
# still ``started``, its lease live (a lease that ran out may already be another's).
_OURS = (
    "COALESCE(claim_nonce = %(nonce)s AND status = 'started' AND attempts = {attempts}"
    " AND lease_expires_at > clock_timestamp(), false)"
)

# Claim a key, or read the row that holds it: one statement, one commit. ``claimed`` tells
# our insert from a foreign row. A key is a call's exact identity (thread, graph
# namespace, call reference, and the checkpoint its step ran from: `_core.ledger.keys`);
# equal arguments never make two calls one. One call has two keys only when its step ran
# from a checkpoint Postgres never held (a run under durability "exit", or checkpoints
# lost before they were stored): the run again comes back to the same reference (a
# recorded model answer gives the same tool-call id) from a new checkpoint. Such a
# recorded call (same thread, namespace and reference, its checkpoint not in
# ``lgd_checkpoints``, not retired) is returned instead of a new row, to go on as that
# call. With ``%(dup_window)s`` (seconds) set, a succeeded call of the same thread, tool
# and arguments under another key within the window, decided by another checkpoint than
# ``%(checkpoint_id)s`` (calls of one model message or one step are siblings, not
# duplicates) and not retired with a deleted conversation, is named in ``duplicate_of``.
# Zero rows means a concurrent claim committed after this statement's snapshot: run it
# again. ``%(nonce)s`` is the call's claim nonce: a claim whose reply was lost, run again,
# finds its own committed row (same nonce, still ``started`` under a live lease) and
# reports it ``claimed`` too.
# %(key)s %(thread_id)s %(checkpoint_ns)s %(call_ref)s %(tool_call_id)s %(task_id)s %(tool)s
# %(fingerprint)s %(owner)s %(lease)s %(dup_window)s %(nonce)s %(step)s %(checkpoint_id)s
CLAIM_SQL = (
    """
WITH lost AS (
    SELECT s.key FROM {schema}.lgd_tool_calls s
    WHERE %(checkpoint_id)s::text IS NOT NULL AND s.thread_id = %(thread_id)s
      AND s.checkpoint_ns = %(checkpoint_ns)s AND s.call_ref = %(call_ref)s
      AND s.key <> %(key)s AND s.retired_at IS NULL
      AND s.checkpoint_id IS NOT NULL AND s.checkpoint_id <> %(checkpoint_id)s::text
      AND NOT EXISTS (SELECT 1 FROM {schema}.lgd_checkpoints c
                      WHERE c.thread_id = s.thread_id AND c.checkpoint_ns = s.checkpoint_ns
                        AND c.checkpoint_id = s.checkpoint_id)
      AND NOT EXISTS (SELECT 1 FROM {schema}.lgd_tool_calls o WHERE o.key = %(key)s)
    ORDER BY s.started_at DESC LIMIT 1
), dup AS (
    SELECT d.key FROM {schema}.lgd_tool_calls d
    WHERE %(dup_window)s::float8 IS NOT NULL
      AND d.thread_id = %(thread_id)s AND d.tool = %(tool)s
      AND d.args_fingerprint = %(fingerprint)s AND d.key <> %(key)s
      AND d.status = 'succeeded' AND d.retired_at IS NULL
      AND COALESCE(d.checkpoint_id <> %(checkpoint_id)s::text, true)
      AND d.finished_at > clock_timestamp() - make_interval(secs => %(dup_window)s::float8)
    ORDER BY d.finished_at DESC LIMIT 1
), ins AS (
    INSERT INTO {schema}.lgd_tool_calls (key, thread_id, checkpoint_ns, call_ref,
        tool_call_id, task_id, tool, args_fingerprint, status, attempts, lease_owner,
        lease_expires_at, duplicate_of, claim_nonce, step, checkpoint_id)
    SELECT %(key)s, %(thread_id)s, %(checkpoint_ns)s, %(call_ref)s, %(tool_call_id)s,
        %(task_id)s, %(tool)s, %(fingerprint)s, 'started', 1, %(owner)s, """
    + _LEASE
    + """, (SELECT key FROM dup), %(nonce)s, %(step)s::int, %(checkpoint_id)s::text
    WHERE NOT EXISTS (SELECT 1 FROM lost)
    ON CONFLICT (key) DO NOTHING
    RETURNING *
)
SELECT true AS claimed, """
    + _RECORD
    + """ FROM ins
UNION ALL
SELECT """
    + _OURS.format(attempts="1")
    + """ AS claimed, """
    + _RECORD
    + """ FROM {schema}.lgd_tool_calls
WHERE key = %(key)s AND NOT EXISTS (SELECT 1 FROM ins)
UNION ALL
SELECT false AS claimed, """
    + _RECORD
    + """ FROM {schema}.lgd_tool_calls
WHERE key = (SELECT key FROM lost)
"""
)

# %(key)s
GET_SQL = "SELECT " + _RECORD + " FROM {schema}.lgd_tool_calls WHERE key = %(key)s"

# Whether Postgres holds the checkpoint that decided a call and, for a call in a subgraph,
# the checkpoint each enclosing graph's step ran from (a parent's checkpoint lost would run
# the subgraph again under a new namespace, its calls as new calls), and the call's record
# if it has one (all its columns NULL when not), in one round trip
# (`protocol._decision_durable`). %(thread_id)s %(namespaces)s %(checkpoint_ids)s %(key)s
DECISION_SQL = (
    """
SELECT (SELECT count(*) FROM {schema}.lgd_checkpoints c
        JOIN unnest(%(namespaces)s::text[], %(checkpoint_ids)s::text[]) AS a(ns, id)
          ON c.checkpoint_ns = a.ns AND c.checkpoint_id = a.id
        WHERE c.thread_id = %(thread_id)s) = cardinality(%(checkpoint_ids)s::text[])
       AS decided, r.*
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (SELECT """
    + _RECORD
    + """ FROM {schema}.lgd_tool_calls WHERE key = %(key)s) AS r ON true
"""
)

# %(thread_id)s
LIST_SQL = (
    "SELECT " + _RECORD + " FROM {schema}.lgd_tool_calls WHERE thread_id = %(thread_id)s"
    " ORDER BY started_at, key"
)

# %(thread_id)s (NULL: every thread)
COUNT_SQL = """
SELECT status, count(*) AS n FROM {schema}.lgd_tool_calls
WHERE %(thread_id)s::text IS NULL OR thread_id = %(thread_id)s
GROUP BY status
"""

# started -> uncertain, fenced by attempt and owner; unless %(force)s (the owner is provably
# dead), only once the lease ran out. %(key)s %(attempts)s %(lease_owner)s %(force)s
MARK_UNCERTAIN_SQL = (
    """
UPDATE {schema}.lgd_tool_calls SET status = 'uncertain'
WHERE key = %(key)s AND status = 'started' AND attempts = %(attempts)s
  AND lease_owner IS NOT DISTINCT FROM %(lease_owner)s
  AND (%(force)s OR lease_expires_at < clock_timestamp())
RETURNING """
    + _RECORD
)

# failed (retryable) or uncertain -> started by a new attempt under our lease, stamped with
# the call's nonce; run again after a lost reply, it returns the attempt it committed.
# %(key)s %(from_status)s %(attempts)s %(owner)s %(lease)s %(nonce)s
RECLAIM_SQL = (
    """
WITH upd AS (
    UPDATE {schema}.lgd_tool_calls SET status = 'started', attempts = attempts + 1,
        lease_owner = %(owner)s, lease_expires_at = """
    + _LEASE
    + """, claim_nonce = %(nonce)s,
        result = NULL, error = NULL, error_type = NULL, retryable = NULL, finished_at = NULL
    WHERE key = %(key)s AND status = %(from_status)s AND attempts = %(attempts)s
    RETURNING *
)
SELECT """
    + _RECORD
    + """ FROM upd
UNION ALL
SELECT """
    + _RECORD
    + """ FROM {schema}.lgd_tool_calls
WHERE key = %(key)s AND NOT EXISTS (SELECT 1 FROM upd) AND """
    + _OURS.format(attempts="%(attempts)s + 1")
    + """
"""
)

# Our attempt's outcome. Fenced by attempt and owner: a late outcome still settles a row a
# peer only marked uncertain, never one a newer attempt took over.
# %(key)s %(attempts)s %(owner)s %(status)s %(result)s %(error)s %(error_type)s %(retryable)s
FINISH_SQL = """
UPDATE {schema}.lgd_tool_calls SET status = %(status)s, result = %(result)s,
    error = %(error)s, error_type = %(error_type)s, retryable = %(retryable)s,
    finished_at = clock_timestamp(), lease_expires_at = NULL
WHERE key = %(key)s AND attempts = %(attempts)s AND lease_owner = %(owner)s
  AND status IN ('started', 'uncertain')
RETURNING key
"""

# A fresh claim that replays the probable duplicate it was flagged with (never ran: 0
# attempts). %(key)s %(owner)s %(duplicate_of)s
REPLAY_DUPLICATE_SQL = (
    """
UPDATE {schema}.lgd_tool_calls t SET status = 'succeeded', attempts = 0, result = d.result,
    finished_at = clock_timestamp(), lease_expires_at = NULL
FROM {schema}.lgd_tool_calls d
WHERE t.key = %(key)s AND t.status = 'started' AND t.attempts = 1
  AND t.lease_owner = %(owner)s AND d.key = %(duplicate_of)s AND d.status = 'succeeded'
  AND d.result IS NOT NULL
RETURNING """
    + _T_RECORD
)

# A call an operator may settle: uncertain, or started under a lease that ran out.
_SETTLEABLE = (
    "(status = 'uncertain' OR (status = 'started' AND lease_expires_at < clock_timestamp()))"
)

# Settle an uncertain call (verify, a human, an operator), or a started one whose lease ran
# out. %(key)s %(attempts)s (NULL: any) %(status)s %(result)s %(error)s %(error_type)s
# %(retryable)s
RESOLVE_SQL = (
    """
UPDATE {schema}.lgd_tool_calls SET status = %(status)s, result = %(result)s,
    error = %(error)s, error_type = %(error_type)s, retryable = %(retryable)s,
    finished_at = clock_timestamp(), lease_expires_at = NULL
WHERE key = %(key)s AND (%(attempts)s::int IS NULL OR attempts = %(attempts)s)
  AND """
    + _SETTLEABLE
    + """
RETURNING """
    + _RECORD
)

# The calls `RESOLVE_SQL` would settle, across threads, oldest first: of one tool, of one
# thread, first claimed at least %(older_than)s seconds ago by the database's clock (each
# NULL: any), at most %(limit)s (NULL: all). An operator's query: it scans the table.
# %(tool)s %(thread_id)s %(older_than)s %(limit)s
LIST_UNSETTLED_SQL = (
    "SELECT "
    + _RECORD
    + """ FROM {schema}.lgd_tool_calls
WHERE """
    + _SETTLEABLE
    + """
  AND (%(tool)s::text IS NULL OR tool = %(tool)s)
  AND (%(thread_id)s::text IS NULL OR thread_id = %(thread_id)s)
  AND (%(older_than)s::float8 IS NULL
       OR started_at < clock_timestamp() - make_interval(secs => %(older_than)s::float8))
ORDER BY started_at, key
LIMIT %(limit)s
"""
)

# Extend the leases of our running calls. %(owner)s %(keys)s %(attempts)s %(leases)s
HEARTBEAT_SQL = """
UPDATE {schema}.lgd_tool_calls t
SET lease_expires_at = clock_timestamp() + make_interval(secs => x.lease)
FROM unnest(%(keys)s::text[], %(attempts)s::int[], %(leases)s::float8[])
     AS x(key, attempts, lease)
WHERE t.key = x.key AND t.attempts = x.attempts AND t.lease_owner = %(owner)s
  AND t.status = 'started'
RETURNING t.key
"""

# Retention follows the thread (added to `ops.delete_threads`). %(thread_ids)s
DELETE_THREADS_LEDGER_SQL = """
DELETE FROM {schema}.lgd_tool_calls WHERE thread_id = ANY(%(thread_ids)s)
"""

# A deleted thread whose ledger is kept (``keep_ledger``): its rows stay as an audit trail,
# listed with the thread, and never answer a call of a later conversation on the same
# thread id. Each derived-key row is retired: stamped, and moved off the key a new call
# could derive (``<key>~retired:<microseconds>``), keeping the key the downstream API saw
# in ``idempotency_key``. Explicit keys are global and stay. Shared with the idle sweep.
RETIRE_LEDGER_ROWS = """
UPDATE {schema}.lgd_tool_calls SET retired_at = clock_timestamp(),
    idempotency_key = COALESCE(idempotency_key, key),
    key = key || '~retired:' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
WHERE call_ref IS NOT NULL AND retired_at IS NULL AND thread_id """

# %(thread_ids)s
RETIRE_THREADS_LEDGER_SQL = RETIRE_LEDGER_ROWS + "= ANY(%(thread_ids)s)\n"

# `ops.copy_thread`: derived keys are recomputed for the target; explicit keys are global
# and stay with the source. With %(up_to)s (a fork), only the calls whose step's
# checkpoint is not newer go, as with the checkpoints (the fork's re-run can come back to
# those alone), whether or not that checkpoint was stored: under durability "exit" a run
# stores only its last one, whose state holds every call the run made. Each copy
# keeps the key the downstream API saw for the original (``idempotency_key``), so a fork
# that retries a call cut off in the source presents the key the provider already knows.
# %(source)s %(target)s %(up_to)s
COPY_THREAD_LEDGER_SQL = """
INSERT INTO {schema}.lgd_tool_calls (key, thread_id, checkpoint_ns, call_ref, tool_call_id,
    task_id, tool, args_fingerprint, status, attempts, result, error, error_type, retryable,
    lease_owner, lease_expires_at, duplicate_of, started_at, finished_at, idempotency_key, step,
    checkpoint_id)
SELECT 'lgd-' || left(encode(sha256(convert_to(
           octet_length(%(target)s)::text || ':' || %(target)s || '|'
           || octet_length(checkpoint_ns)::text || ':' || checkpoint_ns || '|'
           || octet_length(call_ref)::text || ':' || call_ref
           || COALESCE('|' || octet_length(checkpoint_id)::text || ':' || checkpoint_id, ''),
           'UTF8')), 'hex'), 40),
       %(target)s, checkpoint_ns, call_ref, tool_call_id, task_id, tool, args_fingerprint,
       status, attempts, result, error, error_type, retryable, lease_owner, lease_expires_at,
       duplicate_of, started_at, finished_at, COALESCE(idempotency_key, key), step,
       checkpoint_id
FROM {schema}.lgd_tool_calls
WHERE thread_id = %(source)s AND call_ref IS NOT NULL AND retired_at IS NULL
  AND (%(up_to)s::text IS NULL OR checkpoint_id IS NULL OR checkpoint_id <= %(up_to)s)
ON CONFLICT (key) DO NOTHING
"""


@dataclass(frozen=True, slots=True, init=False, eq=False)
class LedgerStatements(Rendered):
    """The ledger's statements rendered for one schema."""

    TEMPLATES: ClassVar[Mapping[str, str]] = {
        "claim": CLAIM_SQL,
        "get": GET_SQL,
        "decision": DECISION_SQL,
        "list": LIST_SQL,
        "count": COUNT_SQL,
        "mark_uncertain": MARK_UNCERTAIN_SQL,
        "reclaim": RECLAIM_SQL,
        "finish": FINISH_SQL,
        "replay_duplicate": REPLAY_DUPLICATE_SQL,
        "resolve": RESOLVE_SQL,
        "list_unsettled": LIST_UNSETTLED_SQL,
        "heartbeat": HEARTBEAT_SQL,
        "delete_threads": DELETE_THREADS_LEDGER_SQL,
        "retire_threads": RETIRE_THREADS_LEDGER_SQL,
        "copy_thread": COPY_THREAD_LEDGER_SQL,
    }

    claim: sql.SQL
    get: sql.SQL
    decision: sql.SQL
    list: sql.SQL
    count: sql.SQL
    mark_uncertain: sql.SQL
    reclaim: sql.SQL
    finish: sql.SQL
    replay_duplicate: sql.SQL
    resolve: sql.SQL
    list_unsettled: sql.SQL
    heartbeat: sql.SQL
    delete_threads: sql.SQL
    retire_threads: sql.SQL
    copy_thread: sql.SQL


# Every statement rendered for a schema, once per schema.
statements = functools.lru_cache(maxsize=64)(LedgerStatements)
