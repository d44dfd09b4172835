"""Fragments that several statements of the cold tier share."""

from __future__ import annotations

# Every commit that changes a namespace takes a new version from one sequence, so versions
# only grow, across deletes and copies too. Redis keeps the newest version it has seen of
# each namespace and refuses an older copy (see `_core/scripts/`). A statement that meets
# an existing row (``ON CONFLICT ... DO UPDATE``) draws the row's version there, once it
# holds the row's lock, never ``EXCLUDED.version``: that one was drawn before the statement
# waited for the lock, so a write that commits after another would carry a smaller
# version, and a copy read between the two commits would not be refused.
NEXT_VERSION = "nextval('{schema}.lgd_version_seq')"

# Re-putting a checkpoint (a retried write, a re-flushed batch) replaces it.
CHECKPOINT_CONFLICT = """
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
    parent_checkpoint_id = EXCLUDED.parent_checkpoint_id,
    run_id = EXCLUDED.run_id,
    checkpoint = EXCLUDED.checkpoint,
    channel_versions = EXCLUDED.channel_versions,
    metadata = EXCLUDED.metadata
"""
