"""Statements of the marks that tell Redis a thread's hot copy is stale."""

from __future__ import annotations

from langgraph_durable._core.sql.parts import NEXT_VERSION

# A write that bypassed Redis marks the thread, in its own transaction: every process
# applies the marks Redis has not seen before it trusts Redis, and then every
# `stale_poll_interval`. One mark per thread: a newer one takes a new sequence number.
# %(thread_id)s
MARK_HOT_STALE_SQL = (
    "INSERT INTO {schema}.lgd_hot_marks (thread_id, version) VALUES (%(thread_id)s, "
    + NEXT_VERSION
    + ") ON CONFLICT (thread_id) DO UPDATE SET seq = nextval('{schema}.lgd_mark_seq'), "
    "version = " + NEXT_VERSION + ", at = now()"
)

# After a mark: every namespace of the thread gets a version above the mark's. %(thread_id)s
BUMP_THREAD_SQL = (
    "UPDATE {schema}.lgd_heads SET version = "
    + NEXT_VERSION
    + " WHERE thread_id = %(thread_id)s"
)

# Last in a transaction that marked threads: number its marks anew, under a lock held
# until it commits. A reader that sees a mark numbered N has then seen every mark
# numbered below N that will ever commit, so it may record N as applied. (Numbered when
# made, a mark could commit after a newer one that a reader already recorded as applied,
# and no process would ever apply it.) The lock is taken after every row lock of the
# transaction, and no row lock is awaited while it is held, so it adds no deadlock; it
# orders only writes that bypassed Redis. %(thread_ids)s
ORDER_MARKS_SQL = (
    "SELECT pg_advisory_xact_lock(hashtext('{schema}.lgd_mark_seq'))"
)
RENUMBER_MARKS_SQL = (
    "UPDATE {schema}.lgd_hot_marks SET seq = nextval('{schema}.lgd_mark_seq') "
    "WHERE thread_id = ANY(%(thread_ids)s)"
)

# %(after)s: the marks Redis has not applied yet, oldest first
PENDING_MARKS_SQL = """
SELECT seq, thread_id, version FROM {schema}.lgd_hot_marks
WHERE seq > %(after)s ORDER BY seq LIMIT 500
"""

# The newest mark (0 when there is none).
NEWEST_MARK_SQL = "SELECT coalesce(max(seq), 0) AS seq FROM {schema}.lgd_hot_marks"

# Marks older than any hot copy they could describe (%(keep)s seconds: twice the hot TTL).
FORGET_MARKS_SQL = """
DELETE FROM {schema}.lgd_hot_marks WHERE at < now() - make_interval(secs => %(keep)s)
"""

