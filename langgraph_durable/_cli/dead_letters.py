"""``langgraph-durable dead-letters``: journal entries Postgres rejected, and what to do.

A write-behind entry Postgres refuses for what it holds (a value or a key it cannot
store) is moved out of the journal into the dead letters so that every other entry keeps
draining. An operator lists them, fixes the cause (for instance relaxes a constraint
that refused them), then retries them onto the journal or drops them for good.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from langgraph_durable._cli.views import human_bytes
from langgraph_durable._tiers.engine import DeadLetter
from langgraph_durable.errors import ConfigurationError
from langgraph_durable.saver import DurableSaver


def letters(saver: DurableSaver, limit: int) -> list[DeadLetter]:
    """The prefix's dead letters, at most ``limit`` (in `Engine.dead_letters`' order)."""
    return saver.engine.dead_letters(limit)


def letters_table(found: Sequence[DeadLetter]) -> Table:
    """One line per dead letter: id, what it held, where, size, and why it was rejected."""
    table = Table(title=f"{len(found)} dead letter(s)", title_justify="left")
    for name in ("id", "kind", "thread", "namespace", "checkpoint", "size", "reason"):
        table.add_column(name, overflow="fold")
    for letter in found:
        table.add_row(
            letter.id,
            letter.kind,
            _short(letter.thread_id),
            _short(letter.checkpoint_ns),
            letter.checkpoint_id,
            human_bytes(letter.size),
            Text(letter.reason, style="red"),
        )
    return table


def resolve(saver: DurableSaver, letter_id: str, action: str) -> str:
    """Retry or drop one dead letter; returns what happened, in words.

    Raises:
        ConfigurationError: there is no such dead letter, or it cannot be retried.
    """
    outcome = saver.engine.resolve_dead_letter(letter_id, action)
    if not outcome:
        raise ConfigurationError(
            f"no dead letter {letter_id!r} under prefix {saver.config.key_prefix!r}: "
            "`langgraph-durable dead-letters list` shows them"
        )
    if action == "drop":
        return f"dropped dead letter {letter_id}"
    return (
        f"dead letter {letter_id} is back on the journal as entry {outcome}; a flusher "
        "moves it to Postgres (or back to the dead letters if Postgres still rejects it)"
    )


def _short(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
