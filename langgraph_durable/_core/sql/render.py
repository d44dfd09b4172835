"""How every statement of the package is rendered: once per schema, into a frozen set,
each at its first use.

A template is a string with a ``{schema}`` placeholder; `render` quotes the schema with
``psycopg.sql.Identifier`` (nothing user-supplied is ever formatted in). A statement set
is a frozen, slotted dataclass deriving from `Rendered`: one ``sql.SQL`` field per
statement, and ``TEMPLATES`` naming each field's template; sets compare by identity.
Parameters are named (``%(thread_id)s``) so each statement documents its own inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from psycopg import sql


def render(template: str, schema: str) -> sql.SQL:
    """Render a template for ``schema`` (quoted as an identifier), once: a composition
    would be rendered again at every execution, which costs more than sending it. (The
    schema is a plain identifier, so its quoting needs no connection.)"""
    return sql.SQL(sql.SQL(template).format(schema=sql.Identifier(schema)).as_string(None))


@dataclass(frozen=True, slots=True, init=False, eq=False)
class Rendered:
    """A set of statements rendered for one schema: ``Set(schema)`` renders each field
    from its template in ``TEMPLATES`` (`tests/core/test_layers.py` checks that the fields
    and the templates agree, so a misspelled name fails there and in the type checker)."""

    TEMPLATES: ClassVar[Mapping[str, str]] = {}
    schema: str

    def __init__(self, schema: str) -> None:
        object.__setattr__(self, "schema", schema)

    def __getattr__(self, name: str) -> sql.SQL:
        """A statement is rendered at its first use and kept (its field is empty until
        then): a new process's first call renders the statements it runs, not the set's
        forty others, which would delay its first read by most of a millisecond."""
        template = type(self).TEMPLATES.get(name)
        if template is None:
            raise AttributeError(f"{type(self).__name__} has no statement {name!r}")
        rendered = render(template, self.schema)
        object.__setattr__(self, name, rendered)  # two threads may both render it: equal
        return rendered
