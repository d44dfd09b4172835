"""The ``langgraph-durable`` script: the command line, or how to install it.

A plain install of the package installs the script but not typer and rich (the ``[cli]``
extra), so this module imports neither: it says how to add them instead of
failing with a traceback.
"""

from __future__ import annotations

import sys

INSTALL_HINT = "pip install typer rich (or, in a checkout, pip install '.[cli]')"
_CLI_PACKAGES = frozenset({"typer", "rich", "click"})


def main() -> None:
    """Run the command line; without the ``[cli]`` extra, print how to install it, exit 1."""
    try:
        from langgraph_durable.cli import main as run
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in _CLI_PACKAGES:
            raise
        print(f"langgraph-durable: the command line needs the [cli] extra ({exc.name} is "
              f"not installed): {INSTALL_HINT}", file=sys.stderr)
        raise SystemExit(1) from None
    run()
