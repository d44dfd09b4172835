"""What the CLI's operator actions do: settle uncertain tool calls (one, or every one a
filter picks), fork a thread from a past checkpoint, match threads by metadata. Each runs
through the saver's own API."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig

from langgraph_durable.errors import ConfigurationError, DurableError, ToolCallError
from langgraph_durable.ledger import LedgerRecord, Outcome
from langgraph_durable.saver import DurableSaver


class Refused(DurableError):
    """An operator action that does not apply to what is stored (nothing was changed)."""


def metadata_pattern(items: Sequence[str]) -> dict[str, Any]:
    """``["user=alice", "step=3"]`` as the filter ``{"user": "alice", "step": 3}``: each
    value is read as JSON when it is JSON, else taken as text.

    Raises:
        ConfigurationError: an item has no ``=`` or an empty key.
    """
    pattern: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigurationError(f"--where takes KEY=VALUE (e.g. --where user=alice), "
                                     f"not {item!r}")
        try:
            pattern[key] = json.loads(text)
        except ValueError:
            pattern[key] = text
    return pattern


def verdict_options(outcome: Outcome, *, result: str | None,
                    error: str | None) -> dict[str, Any]:
    """The keyword arguments of `Ledger.resolve` that ``--result`` and ``--error`` give.

    Raises:
        ConfigurationError: ``result`` is not JSON, or an option does not fit ``outcome``.
    """
    if result is not None and outcome != "succeeded":
        raise ConfigurationError("--result goes with 'succeeded' only")
    if error is not None and outcome != "failed":
        raise ConfigurationError("--error goes with 'failed' only")
    options: dict[str, Any] = {"error": error}
    if result is not None:
        try:
            options["result"] = json.loads(result)
        except ValueError as exc:
            raise ConfigurationError(f"--result must be JSON, e.g. --result '\"refunded\"' or "
                                     f"--result '{{\"id\": 7}}' ({exc})") from exc
    return options


def settle(saver: DurableSaver, key: str, outcome: Outcome, *, result: str | None,
           error: str | None) -> tuple[LedgerRecord, LedgerRecord]:
    """Settle the uncertain call ``key``; returns its record before and after.

    Raises:
        ConfigurationError: ``result`` is not JSON, or an option does not fit ``outcome``.
        Refused: no call has the key, or the call is not uncertain.
    """
    options = verdict_options(outcome, result=result, error=error)
    before = saver.ledger.get(key)
    if before is None:
        raise Refused(f"no tool call has key {key!r} in schema {saver.config.schema!r} "
                      "(`langgraph-durable ledger THREAD` lists a thread's keys)")
    try:
        after = saver.ledger.resolve(key, outcome, **options)
    except ToolCallError as exc:
        raise Refused(f"tool call {key} ({before.tool}, thread {before.thread_id!r}) is "
                      f"{before.status}, not uncertain: nothing to settle") from exc
    return before, after


@dataclass(frozen=True, slots=True)
class Settled:
    """One call of `settle_all`: its record as listed, and after settling (``None`` when
    it was not settled: a dry run, or ``refused``, why not)."""

    before: LedgerRecord
    after: LedgerRecord | None = None
    refused: str | None = None


def settle_all(saver: DurableSaver, calls: Sequence[LedgerRecord], outcome: Outcome, *,
               result: str | None, error: str | None) -> list[Settled]:
    """Settle each of ``calls`` as `settle` does; a call that changed since it was listed
    (another operator or a resumed run settled it) is left as it is, with the reason.

    Raises:
        ConfigurationError: ``result`` is not JSON, or an option does not fit ``outcome``
            (before any call is settled).
    """
    verdict_options(outcome, result=result, error=error)
    done = []
    for call in calls:
        try:
            before, after = settle(saver, call.key, outcome, result=result, error=error)
        except Refused as exc:
            done.append(Settled(call, refused=str(exc)))
        else:
            done.append(Settled(before, after))
    return done


@dataclass(frozen=True, slots=True)
class Fork:
    """A thread branched from a past checkpoint."""

    source: str
    checkpoint_id: str
    thread_id: str
    checkpoints: int


def fork(saver: DurableSaver, source: str, checkpoint_id: str, target: str | None) -> Fork:
    """Copy ``source`` up to ``checkpoint_id`` (every namespace, with the ledger) into
    ``target`` (default: ``SOURCE-fork-XXXXXXXX``), whose head it becomes; the tasks that
    ran from it run again on the fork (a durable tool replays its recorded outcome).

    Raises:
        Refused: ``target`` already has checkpoints.
        ConfigurationError: ``target`` is ``source``.
    """
    target = target or f"{source}-fork-{uuid.uuid4().hex[:8]}"
    if target == source:
        raise ConfigurationError("--to must name a new thread, not the one forked")
    config: RunnableConfig = {"configurable": {"thread_id": target}}
    # get_tuple reads Redis first: it sees a root checkpoint written behind, not flushed yet
    if saver.get_tuple(config) or next(iter(saver.list(config, limit=1)), None):
        raise Refused(f"thread {target!r} already has checkpoints; give --to a new thread id")
    saver.copy_thread(source, target, up_to=checkpoint_id)
    _, summaries = saver.engine.thread_summaries(thread_ids=[target], limit=1)
    return Fork(source, checkpoint_id, target, summaries[0].checkpoints if summaries else 0)
