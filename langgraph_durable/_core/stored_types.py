"""The types the application stores: recorded in Postgres, allowed on read.

The default serializer (`_core.strict.StrictSerializer`) rebuilds only the types it allows.
A put lists the types its values name (`strict.named_types`); one this process does not
allow yet is checked (would it read back at all?), recorded in Postgres, the trusted tier,
and allowed, all before the value is stored in either tier. A reader that meets a type it
does not allow learns the recorded types and decodes again; a type still refused then was
never stored by the application through this schema (a forged frame, or a value written
with another serializer), and is refused, never decoded.

With a serializer of the application's own (``serde=``) none of this runs: that
serializer decides what it rebuilds.
"""

from __future__ import annotations

from collections.abc import Iterable

from langgraph_durable._core.context import Context
from langgraph_durable._core.records import Location
from langgraph_durable._core.requests import Cold, Op
from langgraph_durable._core.strict import StrictSerializer, TypeKey, unreadable
from langgraph_durable.errors import SerializationError


def record(ctx: Context, types: Iterable[TypeKey], where: Location) -> Op[None]:
    """Record the types a put's values name that this process does not allow yet.

    Raises:
        SerializationError: a value names a type that could never be read back; nothing
            was stored.
    """
    serde = ctx.serde
    if not isinstance(serde, StrictSerializer):
        return
    new = sorted(serde.unknown(types))
    if not new:
        return
    for key in new:
        if why := unreadable(key):
            name = ".".join(key)
            raise SerializationError(
                f"a value of thread {where.thread_id!r} (namespace {where.checkpoint_ns!r}) "
                f"names type {name}, which could not be read back: {why}. Nothing was "
                "stored; keep such values out of the graph state, or pass a serializer "
                "that handles them (serde=)",
                thread_id=where.thread_id,
                checkpoint_ns=where.checkpoint_ns,
                checkpoint_id=where.checkpoint_id,
            )
    yield Cold.one(
        ctx.statements.record_types_sql,
        {"modules": [k[0] for k in new], "names": [k[1] for k in new]},
    )
    serde.allow(new)


def learn(ctx: Context, refused: TypeKey) -> Op[bool]:
    """Allow every type the application recorded; whether ``refused`` is one of them."""
    serde = ctx.serde
    if not isinstance(serde, StrictSerializer) or len(refused) != 2:
        return False
    rows = (yield Cold.one(ctx.statements.known_types_sql, {}, fetch=True))[0]
    serde.allow((row["module"], row["name"]) for row in rows)
    return refused in serde.allowed
