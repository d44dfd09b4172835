"""Executing the notebooks in notebooks/, and storing them executed.

The tests execute each notebook in memory (the file is never rewritten). To refresh the
committed outputs after changing a notebook, run, against servers that answer (the
``LGD_*`` URLs, else the local ones)::

    python -m tests.support.notebook_runner            # every notebook
    python -m tests.support.notebook_runner 05_multi_agent

It executes each notebook top to bottom, replaces what is particular to this machine in
the outputs (the checkout's folder, the temporary folder, the home folder, the host name)
by a placeholder, and writes it back; it fails, writing nothing, when a cell fails or an
output still holds a machine path (see `machine_details`).
"""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import nbclient
import nbformat
from nbformat import NotebookNode

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"

# Absolute paths that name a machine's folders (a home, a checkout, a temporary folder).
MACHINE_PATH = re.compile(r"(?<![\w.:/])/(?:work|tmp|root|home|Users|private|var/folders|"
                          r"opt|mnt|srv)/[^\s'\"]*")
# A process as a tool-call lease owner or journal consumer: "host[~boot]:pid:random".
PROCESS_NAME = re.compile(r"[\w.-]+(?:~[0-9a-f]{8})?:\d+:[0-9a-f]{8,}")


def execute(name: str, env: Mapping[str, str]) -> NotebookNode:
    """Run one notebook in a new kernel of this interpreter with ``env``; returns it with
    its outputs (the file is not changed).

    Raises:
        nbclient.exceptions.CellExecutionError: a cell failed (with its traceback).
    """
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=240, kernel_name="python3",
                                     record_timing=False,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    # matplotlib's inline backend: each figure is stored in the notebook as a PNG
    client.execute(env={**{k: v for k, v in os.environ.items() if k != "MPLBACKEND"}, **env})
    return notebook


def _texts(notebook: NotebookNode) -> Iterator[tuple[int, dict[str, Any], str]]:
    """Every text an output holds: (cell index, the output, its text)."""
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            for field in ("text", "traceback", "evalue"):
                if field in output:
                    value = output[field]
                    yield index, output, "\n".join(value) if isinstance(value, list) else value
            for mime, value in output.get("data", {}).items():
                if mime.startswith("text/"):
                    yield index, output, "".join(value) if isinstance(value, list) else value


def _process_names(text: str) -> str:
    """This host's process names (lease owners, consumers) as ``<host>:<pid>:…``."""
    host = re.escape(socket.gethostname().replace(":", "_"))
    return re.sub(rf"\b{host}(?:~[0-9a-f]{{8}})?:\d+:[0-9a-f]{{8,}}", "<host>:<pid>:…", text)


def _replacements() -> list[tuple[str, str]]:
    """This machine's particulars, longest first, and what stands for them."""
    pairs = [(str(NOTEBOOKS.parent), "<checkout>"), (tempfile.gettempdir(), "<tmp>"),
             (str(Path.home()), "~"), (os.path.realpath(sys.prefix), "<venv>"),
             (sys.prefix, "<venv>")]
    host = socket.gethostname()
    if len(host) >= 4:
        pairs.append((host, "<host>"))
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def scrub(notebook: NotebookNode) -> NotebookNode:
    """Replace this machine's folders and host name in every output by a placeholder."""
    pairs = _replacements()

    def clean(text: str) -> str:
        text = _process_names(text)
        for old, new in pairs:
            text = text.replace(old, new)
        return text

    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            for field in ("text", "evalue"):
                if field in output:
                    output[field] = clean(output[field])
            if "traceback" in output:
                output["traceback"] = [clean(line) for line in output["traceback"]]
            for mime, value in output.get("data", {}).items():
                if mime.startswith("text/"):
                    output["data"][mime] = clean(value)
    return notebook


def machine_details(notebook: NotebookNode) -> list[str]:
    """What in the outputs names this machine: an absolute path to one of its folders, its
    host name or a process of it, or a URL with a password."""
    host = socket.gethostname()
    found = []
    for index, _, text in _texts(notebook):
        found += [f"cell {index}: {m.group()}" for m in MACHINE_PATH.finditer(text)]
        found += [f"cell {index}: process {m.group()}" for m in PROCESS_NAME.finditer(text)]
        if len(host) >= 4 and host in text:
            found.append(f"cell {index}: host name {host!r}")
        found += [f"cell {index}: password in {m.group()}"
                  for m in re.finditer(r"\w+://[^\s/:@]+:[^\s/@*]+@", text)]
    return found


def main(names: list[str]) -> int:
    env = {"LGD_REDIS_URL": os.environ.get("LGD_REDIS_URL", REDIS_URL),
           "LGD_POSTGRES_URL": os.environ.get("LGD_POSTGRES_URL", POSTGRES_URL)}
    for name in names or sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")):
        notebook = scrub(execute(name, env))
        left = machine_details(notebook)
        if left:
            print(f"{name}: not written, outputs name this machine: {left}", file=sys.stderr)
            return 1
        nbformat.write(notebook, NOTEBOOKS / f"{name}.ipynb")
        print(f"{name}: executed and stored")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
