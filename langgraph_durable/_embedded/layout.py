"""Where the embedded servers keep their data when no data directory is given.

One rule, used by `langgraph_durable.embedded` (the library) and by the command line's
``demo`` and ``embedded up``: ``$LGD_DATA_DIR`` if set; else, as root,
``/var/lib/langgraph-durable``; else ``$XDG_DATA_HOME/langgraph-durable``, else
``~/.local/share/langgraph-durable``.

Root gets a system folder because PostgreSQL refuses to run as root and runs as the
``lgd-postgres`` account instead, which cannot enter root's home (mode 0700).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

DATA_DIR_ENV: Final = "LGD_DATA_DIR"
"""Environment variable that overrides the default data directory."""
ROOT_DATA_DIR: Final = Path("/var/lib/langgraph-durable")
"""The default data directory of a process running as root."""


def default_data_dir() -> Path:
    """Return the data directory the embedded servers use when none is given.

    Returns:
        ``$LGD_DATA_DIR`` if set; else, as root, ``/var/lib/langgraph-durable``; else
        ``$XDG_DATA_HOME/langgraph-durable``, else ``~/.local/share/langgraph-durable``.
    """
    if env := os.environ.get(DATA_DIR_ENV):
        return Path(env).expanduser()
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return ROOT_DATA_DIR
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "langgraph-durable"
