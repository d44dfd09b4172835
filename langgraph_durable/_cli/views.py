"""How the CLI shows things: rich tables and panels built from plain data, no I/O.

Every string that comes from storage or from the user (thread ids, channel names, values,
tool names, error messages) goes into a table as a `Text`, never as a ``str``: rich reads
a ``str`` cell as markup, so ``chat-[/]`` would crash the table and ``[link=…]`` restyle it.
Tables keep every column at 80 columns: short cells stay on one line, long ones fold.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.store.base import Item
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from langgraph_durable import LedgerRecord, SweepReport

Status = Literal["ok", "warn", "fail", "info"]
_MARK: dict[Status, tuple[str, str]] = {
    "ok": ("✔", "green"), "warn": ("!", "yellow"), "fail": ("✘", "red"), "info": ("·", "dim"),
}
_LEDGER_STYLE = {"succeeded": "green", "failed": "red", "uncertain": "yellow", "started": "cyan"}
INTERRUPT_CHANNEL = "__interrupt__"
SHORT_ID = 10
"""Characters of a checkpoint id shown when the full ids do not fit: the end of its random
node field (40 bits, unique within a thread in practice)."""


# ------------------------------------------------------------------------------ values


def human_bytes(n: int | None) -> str:
    """``1536`` -> ``"1.5 KiB"``; ``None`` -> ``"—"``."""
    if n is None:
        return "—"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def moment(value: datetime | str | None) -> datetime | None:
    """A timestamp (a datetime or an ISO 8601 string) as an aware datetime, naive ones
    taken as UTC; ``None`` when there is none or the string is not ISO 8601."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def when(value: datetime | str | None, *, short: bool = False) -> str:
    """A timestamp as local ``YYYY-MM-DD HH:MM:SS`` (ISO strings are parsed); ``short``
    drops today's date."""
    if value is None:
        return "—"
    parsed = moment(value)
    if parsed is None:
        return str(value)
    local = parsed.astimezone()
    if short and local.date() == datetime.now().astimezone().date():
        return local.strftime("%H:%M:%S")
    return local.strftime("%Y-%m-%d %H:%M:%S")


def clip(text: str, width: int) -> str:
    """One line of at most ``width`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def message_line(message: BaseMessage, width: int = 100) -> str:
    """``ai: content [→ tool(args)]`` for one message."""
    content = message.content if isinstance(message.content, str) else json.dumps(
        message.content, default=str)
    text = f"{message.type}: {content}"
    for call in getattr(message, "tool_calls", None) or []:
        args = json.dumps(call.get("args", {}), default=str)
        text += f" → {call.get('name')}({args})"
    return clip(text, width)


def summarize(value: Any, width: int = 90) -> str:
    """A one-line picture of a channel value."""
    if isinstance(value, BaseMessage):
        return message_line(value, width)
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, BaseMessage) for v in value):
            return clip(f"{len(value)} messages, last {message_line(value[-1], width)}", width)
        return clip(f"{len(value)} items: {value!r}", width)
    if isinstance(value, str):
        return clip(repr(value), width)
    return clip(repr(value), width)


def state_values(tup: CheckpointTuple) -> dict[str, Any]:
    """A checkpoint's state values by channel, sorted, without LangGraph's ``branch:*``."""
    values: Mapping[str, Any] = tup.checkpoint.get("channel_values", {})
    return {c: values[c] for c in sorted(values) if not c.startswith("branch:")}


def pending_writes(tup: CheckpointTuple) -> list[tuple[str, str, Any]]:
    """The ``(task id, channel, value)`` writes pending on a checkpoint, interrupts aside."""
    return [(task, channel, value) for task, channel, value in tup.pending_writes or []
            if channel != INTERRUPT_CHANNEL]


def interrupts_of(tup: CheckpointTuple) -> list[Any]:
    """The interrupts pending on a checkpoint (values written to ``__interrupt__``)."""
    found: list[Any] = []
    for _, channel, value in tup.pending_writes or []:
        if channel == INTERRUPT_CHANNEL:
            found.extend(value if isinstance(value, list | tuple) else [value])
    return found


# --------------------------------------------------------------------------- checkpoint


def checkpoint_header(tup: CheckpointTuple) -> Table:
    """Thread, namespace, id, parent, step, source and time of a checkpoint."""
    conf = tup.config["configurable"]
    meta: Mapping[str, Any] = tup.metadata or {}
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("thread", Text(str(conf["thread_id"])))
    if conf.get("checkpoint_ns"):
        grid.add_row("namespace", Text(str(conf["checkpoint_ns"])))
    grid.add_row("checkpoint", Text(str(conf["checkpoint_id"])))
    grid.add_row("parent", Text(str(parent or "—")))
    grid.add_row("step", Text(f"{meta.get('step', '—')} ({meta.get('source', '?')})"))
    grid.add_row("time", Text(when(tup.checkpoint.get("ts"))))
    return grid


def checkpoint_view(tup: CheckpointTuple, *, width: int = 100) -> RenderableType:
    """State values, pending writes and interrupts of one checkpoint."""
    parts: list[RenderableType] = [checkpoint_header(tup)]
    values = state_values(tup)
    table = Table(title="state values", title_justify="left", expand=False)
    table.add_column("channel", style="cyan", overflow="fold")
    table.add_column("value", overflow="fold")
    for channel, value in values.items():
        if isinstance(value, list) and value and all(isinstance(m, BaseMessage) for m in value):
            table.add_row(Text(channel), Text("\n".join(message_line(m, width) for m in value)))
        else:
            table.add_row(Text(channel), Text(summarize(value, width)))
    if not values:
        table.add_row("—", "(no values)")
    parts.append(table)
    writes = pending_writes(tup)
    if writes:
        pending = Table(title="pending writes (of tasks that finished after this checkpoint)",
                        title_justify="left")
        pending.add_column("task", style="dim", no_wrap=True)
        pending.add_column("channel", style="cyan")
        pending.add_column("value")
        for task_id, channel, value in writes:
            pending.add_row(Text(task_id[:8]), Text(channel), Text(summarize(value, width)))
        parts.append(pending)
    interrupts = interrupts_of(tup)
    if interrupts:
        box = Table(title="interrupts (waiting for Command(resume=...))", title_justify="left")
        box.add_column("id", style="dim", no_wrap=True)
        box.add_column("value", style="yellow")
        for item in interrupts:
            box.add_row(Text(str(getattr(item, "id", ""))[:12]),
                        Text(summarize(getattr(item, "value", item), width)))
        parts.append(box)
    return Group(*parts)


@dataclass(frozen=True, slots=True)
class Change:
    """How one channel differs between two checkpoints: its value ``before`` (``None`` when
    ``added``) and ``after`` (``None`` when ``removed``); ``appended`` when ``after`` is the
    list ``before`` with items added at its end."""

    channel: str
    kind: Literal["added", "removed", "appended", "changed"]
    before: Any = None
    after: Any = None

    @property
    def appended(self) -> list[Any]:
        """The items added at the end of the list (``[]`` unless ``appended``)."""
        return list(self.after[len(self.before):]) if self.kind == "appended" else []


def diff_values(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Change]:
    """Channel-by-channel differences from ``a`` to ``b`` (equal channels are left out)."""
    changes: list[Change] = []
    for channel in sorted(set(a) | set(b)):
        if channel.startswith("branch:"):
            continue
        if channel not in a:
            changes.append(Change(channel, "added", after=b[channel]))
        elif channel not in b:
            changes.append(Change(channel, "removed", before=a[channel]))
        elif a[channel] != b[channel]:
            old, new = a[channel], b[channel]
            grew = isinstance(old, list) and isinstance(new, list) and new[: len(old)] == old
            changes.append(Change(channel, "appended" if grew else "changed", old, new))
    return changes


def _change_cells(change: Change, width: int = 90) -> tuple[str, str]:
    """What the ``before`` and ``after`` columns of ``diff`` show for a change."""
    if change.kind == "added":
        return "", summarize(change.after, width)
    if change.kind == "removed":
        return summarize(change.before, width), ""
    if change.kind == "appended":
        return (f"{len(change.before)} items",
                "\n".join(f"+ {summarize(v, width)}" for v in change.appended))
    return summarize(change.before, width), summarize(change.after, width)


def diff_changes(a: CheckpointTuple, b: CheckpointTuple) -> list[Change]:
    """What changed in the state values from checkpoint ``a`` to checkpoint ``b``."""
    return diff_values(a.checkpoint.get("channel_values", {}),
                       b.checkpoint.get("channel_values", {}))


def diff_view(a: CheckpointTuple, b: CheckpointTuple, changes: Sequence[Change]) -> RenderableType:
    """The ``changes`` from checkpoint ``a`` to checkpoint ``b`` (see `diff_changes`)."""
    step_a = (a.metadata or {}).get("step")
    step_b = (b.metadata or {}).get("step")
    title = Text(f"{a.config['configurable']['checkpoint_id']} (step {step_a}) → "
                 f"{b.config['configurable']['checkpoint_id']} (step {step_b})")
    table = Table(title=title, title_justify="left")
    table.add_column("channel", style="cyan", overflow="fold")
    table.add_column("change", no_wrap=True)
    table.add_column("before", style="red", overflow="fold")
    table.add_column("after", style="green", overflow="fold")
    for change in changes:
        before, after = _change_cells(change)
        table.add_row(Text(change.channel), change.kind, Text(before), Text(after))
    if not changes:
        return Group(table, Text("no differences in state values", style="dim"))
    return table


# ------------------------------------------------------------------------------ tables


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One line of ``history``."""

    checkpoint_id: str
    checkpoint_ns: str
    step: int | None
    source: str | None
    updated_channels: tuple[str, ...]
    time: datetime | None
    added_bytes: int | None
    pending_writes: int
    interrupts: int
    hot: bool | None


def history_table(title: str, rows: Sequence[HistoryRow],
                  notes: Mapping[str, str] | None = None, *, compact: bool = False,
                  width: int | None = None) -> Table:
    """Checkpoints newest first; ``notes`` adds remarks by checkpoint id; ``compact``
    keeps step, checkpoint, source, time of day and bytes added. When the full checkpoint
    ids would not fit in ``width`` columns, each shows its last `SHORT_ID` characters
    (which ``show`` and ``diff`` accept) and the caption says so."""
    table = _history_table(title, rows, notes, compact=compact, short_ids=False)
    if width is None or _natural_width(table) <= width:
        return table
    return _history_table(title, rows, notes, compact=compact, short_ids=True)


def _history_table(title: str, rows: Sequence[HistoryRow], notes: Mapping[str, str] | None,
                   *, compact: bool, short_ids: bool) -> Table:
    show_ns = any(r.checkpoint_ns for r in rows)
    caption = (f"checkpoint ids: their last {SHORT_ID} characters (show and diff take them)"
               if short_ids else None)
    table = Table(title=Text(title), title_justify="left", caption=caption,
                  caption_justify="left")
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("checkpoint", style="cyan", no_wrap=True)
    if show_ns:
        table.add_column("namespace", overflow="fold")
    table.add_column("source", no_wrap=True)
    if not compact:
        table.add_column("updated channels", overflow="fold")
    table.add_column("time", overflow="fold")
    table.add_column("added", justify="right", no_wrap=True)
    if not compact:
        table.add_column("writes", justify="right", overflow="fold")
        table.add_column("redis", justify="center", no_wrap=True)
    if notes:
        table.add_column("", style="bold yellow", no_wrap=True)
    for r in rows:
        shown_id = r.checkpoint_id[-SHORT_ID:] if short_ids else r.checkpoint_id
        cells: list[Text] = [Text("?" if r.step is None else str(r.step)), Text(shown_id)]
        if show_ns:
            cells.append(Text(r.checkpoint_ns or "(root)"))
        cells.append(Text(r.source or "?"))
        if not compact:
            cells.append(Text(", ".join(r.updated_channels) or "—"))
        time = when(r.time, short=True)
        cells += [Text(time[-8:] if compact else time), Text(human_bytes(r.added_bytes))]
        if not compact:
            interrupts = f" ({r.interrupts} interrupt)" if r.interrupts else ""
            cells += [Text(f"{r.pending_writes}{interrupts}"), _yes(r.hot)]
        if notes:
            cells.append(Text(notes.get(r.checkpoint_id, "")))
        table.add_row(*cells)
    return table


def _natural_width(table: Table) -> int:
    """How many columns ``table`` takes when nothing has to wrap."""
    console = Console(width=10_000)
    return Measurement.get(console, console.options, table).maximum


@dataclass(frozen=True, slots=True)
class ThreadRow:
    """One line of ``threads``."""

    thread_id: str
    checkpoints: int | None
    namespaces: int | None
    bytes: int | None
    last_update: datetime | None
    hot: bool | None
    cold: bool
    unflushed: int | None


def threads_table(title: str, rows: Sequence[ThreadRow], caption: str) -> Table:
    """Threads, most recently active first."""
    table = Table(title=Text(title), title_justify="left", caption=Text(caption),
                  caption_justify="left")
    table.add_column("thread", style="cyan", overflow="fold")
    table.add_column("checkpoints", justify="right", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("last update", overflow="fold")
    table.add_column("stored in", overflow="fold")
    table.add_column("unflushed", justify="right", no_wrap=True)
    for r in rows:
        count = "—" if r.checkpoints is None else str(r.checkpoints)
        if r.namespaces and r.namespaces > 1:
            count += f" ({r.namespaces} ns)"
        table.add_row(Text(r.thread_id), count, human_bytes(r.bytes), Text(when(r.last_update)),
                      _tiers(r.hot, r.cold), "—" if r.unflushed is None else str(r.unflushed))
    return table


def _tiers(hot: bool | None, cold: bool) -> Text:
    """``redis, postgres``, ``redis``, ``postgres``; ``redis?`` when Redis was unreadable."""
    names = {None: ["redis?"], True: ["redis"], False: []}[hot] + (["postgres"] if cold else [])
    return Text(", ".join(names) or "—", style="" if names else "dim")


def subgraph_path(checkpoint_ns: str) -> str:
    """A namespace's subgraph nodes without their task ids: ``"booker:1f0…|pay:9a2…"`` is
    ``"booker / pay"`` (``""`` for the root graph)."""
    return " / ".join(part.split(":", 1)[0] for part in checkpoint_ns.split("|") if part)


def ledger_table(title: str, records: Iterable[LedgerRecord]) -> RenderableType:
    """Tool calls of a thread: status, attempts, times, outcome, and under the tool's name
    the subgraph that made a call inside one; below the table, the keys of calls still to
    settle (``langgraph-durable resolve`` takes them)."""
    table = Table(title=Text(title), title_justify="left")
    table.add_column("tool", style="cyan", overflow="fold")
    table.add_column("call", style="dim", max_width=24, overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("attempts", justify="right", no_wrap=True)
    table.add_column("started", overflow="fold")
    table.add_column("finished", overflow="fold")
    table.add_column("result / error", overflow="fold")
    unsettled: list[str] = []
    for rec in records:
        outcome = rec.error or rec.result
        outcome = getattr(outcome, "content", outcome)  # a recorded ToolMessage
        tool = Text(rec.tool)
        if rec.checkpoint_ns:  # made inside a subgraph (a worker agent): say which
            tool.append(f"\nin {subgraph_path(rec.checkpoint_ns)}", style="magenta")
        table.add_row(
            tool, Text(rec.tool_call_id or rec.task_id or "—"),
            Text(rec.status, style=_LEDGER_STYLE.get(rec.status, "")), str(rec.attempts),
            when(rec.started_at, short=True), when(rec.finished_at, short=True),
            Text(clip("" if outcome is None else str(outcome), 80)),
        )
        if rec.status in ("uncertain", "started"):
            unsettled.append(f"  {rec.tool} ({rec.status}): {rec.key}")
    if not unsettled:
        return table
    return Group(table, Text("calls not settled (once uncertain: `langgraph-durable resolve "
                             "KEY succeeded|failed|retry`):", style="yellow"),
                 *map(Text, unsettled))


def unsettled_table(title: str, records: Sequence[LedgerRecord]) -> RenderableType:
    """Tool calls still to settle, across threads: tool, thread, status, attempts and when
    first started; below the table, each one's key whole, as ``resolve`` takes it."""
    table = Table(title=Text(title), title_justify="left")
    table.add_column("tool", style="cyan", overflow="fold")
    table.add_column("thread", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("attempts", justify="right", no_wrap=True)
    table.add_column("started", overflow="fold")
    for rec in records:
        table.add_row(Text(rec.tool), Text(rec.thread_id),
                      Text(rec.status, style=_LEDGER_STYLE.get(rec.status, "")),
                      str(rec.attempts), when(rec.started_at))
    keys = [Text(f"  {rec.tool} ({rec.status}, thread {rec.thread_id!r}): {rec.key}")
            for rec in records]
    return Group(table, Text("their keys:"), *keys)


@dataclass(frozen=True, slots=True)
class Check:
    """One line of ``doctor``."""

    name: str
    status: Status
    detail: str


def checks_table(checks: Sequence[Check]) -> Table:
    """Doctor's findings, one per line."""
    table = Table(show_header=False, box=None, padding=(0, 1))
    table.add_column(width=1)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for check in checks:
        mark, style = _MARK[check.status]
        table.add_row(Text(mark, style=style), check.name, Text(check.detail, style=(
            style if check.status in ("fail", "warn") else "")))
    return table


def note(title: str, body: RenderableType, style: str = "blue") -> Panel:
    """A titled box; a ``str`` body is shown as it is (not read as markup)."""
    return Panel(Text(body) if isinstance(body, str) else body, title=title,
                 title_align="left", border_style=style, expand=False)


def _yes(flag: bool | None) -> Text:
    if flag is None:
        return Text("?", style="dim")
    return Text("●", style="green") if flag else Text("·", style="dim")


def sweep_summary(report: SweepReport) -> str:
    """What a sweep did (or would do, for a dry run), in a few lines."""
    verb = "would delete" if report.dry_run else "deleted"
    lines = [
        f"examined {report.threads_examined} threads in {report.seconds:.2f}s",
        f"{verb}: {report.threads_deleted} idle threads, older checkpoints of "
        f"{report.threads_pruned} threads; {report.checkpoints} checkpoints",
    ]
    if not report.dry_run:
        lines.append(f"rows: {report.writes} writes, {report.blobs} values, {report.ledger} "
                     f"tool calls; {human_bytes(report.bytes)} reclaimed")
    if report.threads_busy:
        lines.append(f"left for the next sweep: {report.threads_busy} threads busy with a writer")
    return "\n".join(lines)


# ------------------------------------------------------------------------------- store


def dotted(namespace: Sequence[str]) -> str:
    """A store namespace as the command line writes it: its labels joined by dots
    (LangGraph forbids a dot in a label, so the form is unambiguous)."""
    return ".".join(namespace)


def pretty_value(value: Any, *, max_lines: int | None = None, width: int | None = None) -> str:
    """A stored value as indented JSON, at most ``max_lines`` lines (the last of them then
    says how many were left out) of at most ``width`` characters each (cut with ``…``);
    ``None`` leaves that bound off."""
    lines = json.dumps(value, indent=2, ensure_ascii=False, default=repr).splitlines()
    if max_lines is not None and len(lines) > max_lines:
        left = len(lines) - (max_lines - 1)
        lines = [*lines[: max_lines - 1], f"… {left} more lines (--full shows them)"]
    if width is not None:
        lines = [line if len(line) <= width else line[: width - 1] + "…" for line in lines]
    return "\n".join(lines)


def namespaces_table(title: str, namespaces: Sequence[tuple[str, ...]], caption: str) -> Table:
    """One line per namespace, in the form NAMESPACE arguments take."""
    table = Table(title=Text(title), title_justify="left", caption=Text(caption),
                  caption_justify="left", min_width=max(len(title), len(caption)))
    table.add_column("namespace", style="cyan", overflow="fold")
    for namespace in namespaces:
        table.add_row(Text(dotted(namespace)))
    return table


NAME_COLUMN = 30
"""The widest a namespace or key column of ``store items`` grows before it folds."""


def items_table(title: str, items: Sequence[Item], caption: str, *,
                max_lines: int | None, width: int | None) -> Table:
    """One line per item: namespace, key, last update, and its value, at most ``max_lines``
    lines long and cut to what is left of ``width`` columns (``None``: no bound)."""
    table = Table(title=Text(title), title_justify="left", caption=Text(caption),
                  caption_justify="left", min_width=max(len(title), len(caption)))
    table.add_column("namespace", style="cyan", overflow="fold")
    table.add_column("key", style="bold", overflow="fold")
    table.add_column("updated", overflow="fold")
    table.add_column("value", overflow="fold")
    cells = [(dotted(item.namespace), item.key, when(item.updated_at, short=True))
             for item in items]
    room = None
    if width is not None and cells:
        beside = sum(min(NAME_COLUMN, max(len(row[i]) for row in cells)) for i in range(3))
        room = max(20, width - beside - 13)  # 5 borders and 2 spaces around 4 cells
    for (namespace, key, updated), item in zip(cells, items, strict=True):
        table.add_row(Text(namespace), Text(key), Text(updated),
                      Text(pretty_value(item.value, max_lines=max_lines, width=room)))
    return table


def item_view(item: Item, *, max_lines: int | None, width: int | None) -> RenderableType:
    """One item: where it is, when it was written, and its value (bounded)."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    grid.add_row("namespace", Text(dotted(item.namespace)))
    grid.add_row("key", Text(item.key))
    grid.add_row("created", Text(when(item.created_at)))
    grid.add_row("updated", Text(when(item.updated_at)))
    return Group(grid, Text(pretty_value(item.value, max_lines=max_lines, width=width)))
