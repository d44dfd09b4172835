"""Every SQL statement of the package, by kind, each kind one set rendered per schema.

`render` holds the pattern (`Rendered`: a frozen dataclass of statements built from its
templates); `schema` the migrations and setup(); `reads`, `writes`, `flush`, `threads` and
`marks` the cold tier's templates, rendered together as `Statements`; `sweep`, `ledger`
and `inspection` the retention sweep's, the tool-call ledger's and the operators' reads.
"""

from langgraph_durable._core.sql.render import render
from langgraph_durable._core.sql.schema import CORE_MIGRATIONS, Migration
from langgraph_durable._core.sql.statements import Statements

__all__ = ["CORE_MIGRATIONS", "Migration", "Statements", "render"]
