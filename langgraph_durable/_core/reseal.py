"""`copy_thread` when frames are sealed: every frame is bound to its thread (`_core.seal`),
so Postgres cannot copy the bytes as they are. The source's frames are opened with their
own place and sealed again for the target's; a frame that fails to open stops the copy
with `CorruptStateError`, so a forged row is never laundered into a genuine one.
"""

from __future__ import annotations

from typing import Any

from langgraph_durable._core.codec import FrameError
from langgraph_durable._core.context import Context
from langgraph_durable._core.records import Damaged, Location, corrupt
from langgraph_durable._core.requests import Cold, Op, Statement
from langgraph_durable._core.seal import blob_place, checkpoint_place, write_place


def copy_statement(
    ctx: Context, source: str, target: str, up_to: str | None = None
) -> Op[Statement]:
    """The statement that copies ``source``'s rows to ``target`` (run in the caller's
    transaction): plain SQL when frames carry no key, else with every frame resealed.
    With ``up_to``, only the checkpoints up to that id and the writes of those before it."""
    st = ctx.statements
    ids = {"source": source, "target": target, "up_to": up_to}
    if not ctx.seal.keyed:
        return Statement(st.copy_thread_sql, ids)
    checkpoints, blobs, writes = yield Cold(
        tuple(
            Statement(query, {"source": source, "up_to": up_to}, fetch=True)
            for query in (
                st.copy_source_checkpoints_sql,
                st.copy_source_blobs_sql,
                st.copy_source_writes_sql,
            )
        )
    )
    reseal = _Resealer(ctx, source, target)
    params: dict[str, Any] = dict(ids)
    params["c_ns"] = [r["checkpoint_ns"] for r in checkpoints]
    params["c_ids"] = [r["checkpoint_id"] for r in checkpoints]
    params["c_frames"] = [
        reseal(
            r, "checkpoint", None, checkpoint_place, r["checkpoint_id"], r["parent_checkpoint_id"]
        )
        for r in checkpoints
    ]
    params["b_ns"] = [r["checkpoint_ns"] for r in blobs]
    params["b_channels"] = [r["channel"] for r in blobs]
    params["b_versions"] = [r["version"] for r in blobs]
    params["b_frames"] = [
        reseal(r, "blob", r["channel"], blob_place, r["channel"], r["version"]) for r in blobs
    ]
    params["w_ns"] = [r["checkpoint_ns"] for r in writes]
    params["w_ids"] = [r["checkpoint_id"] for r in writes]
    params["w_tasks"] = [r["task_id"] for r in writes]
    params["w_idxs"] = [r["idx"] for r in writes]
    params["w_frames"] = [
        reseal(
            r,
            "write",
            r["channel"],
            write_place,
            r["checkpoint_id"],
            r["task_id"],
            r["idx"],
            r["channel"],
            r["task_path"],
        )
        for r in writes
    ]
    return Statement(st.copy_thread_resealed_sql, params)


class _Resealer:
    """Opens a source row's frame with its place and seals it for the target thread."""

    def __init__(self, ctx: Context, source: str, target: str) -> None:
        self.seal = ctx.seal
        self.source, self.target = source, target

    def __call__(
        self, row: dict[str, Any], part: str, channel: str | None, place: Any, *parts: Any
    ) -> bytes:
        ns = row["checkpoint_ns"]
        frame = row["checkpoint"] if part == "checkpoint" else row["blob"]
        try:
            body = self.seal.open(frame, place(self.source, ns, *parts))
        except FrameError as exc:
            where = Location(self.source, ns, None)
            damage = Damaged(part, str(exc), channel)
            raise corrupt(where, row.get("checkpoint_id") or "", damage, "cold") from exc
        return self.seal.seal(bytes(body), place(self.target, ns, *parts))
