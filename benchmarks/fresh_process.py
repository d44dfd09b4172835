"""A new process's first read: construct a saver without ``setup()``, read one thread.

    python -m benchmarks.fresh_process REQUEST

The restart section runs this in a new interpreter per sample (:func:`first_read`), as an
application process starts once the schema exists: it builds the saver (and connects), then
reads the thread's latest checkpoint, which must be the one the request names. It prints
one JSON line with both durations in ns. Imports happen before the clock starts.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from benchmarks.savers import SPECS_BY_NAME, Namespace
from benchmarks.settings import Settings
from benchmarks.workloads import expect_checkpoint, thread_config

ROOT = Path(__file__).resolve().parent.parent
"""The directory that holds the ``benchmarks`` package: the new process's working directory."""
MODULE = "benchmarks.fresh_process"
TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """What the new process reads, and what it must get back."""

    saver: str
    """A saver's name in :data:`~benchmarks.savers.SPECS_BY_NAME`."""
    section: str
    """The namespace's section (see :class:`~benchmarks.savers.Namespace`)."""
    redis_url: str
    postgres_url: str
    database: str
    run_id: str
    workdir: str
    thread: str
    checkpoint_id: str
    messages: int
    writes: int

    @classmethod
    def of(
        cls, ns: Namespace, *, thread: str, checkpoint_id: str, messages: int, writes: int
    ) -> Request:
        """A request to read ``thread`` from the saver of ``ns``."""
        settings = ns.settings
        return cls(
            saver=ns.saver,
            section=ns.section,
            redis_url=settings.redis_url,
            postgres_url=settings.postgres_url,
            database=settings.database,
            run_id=settings.run_id,
            workdir=str(settings.workdir),
            thread=thread,
            checkpoint_id=checkpoint_id,
            messages=messages,
            writes=writes,
        )

    def namespace(self) -> Namespace:
        """The saver's namespace, rebuilt in the new process."""
        settings = Settings(
            redis_url=self.redis_url,
            postgres_url=self.postgres_url,
            database=self.database,
            run_id=self.run_id,
            workdir=Path(self.workdir),
        )
        return Namespace(settings=settings, saver=self.saver, section=self.section)


@dataclass(frozen=True, slots=True)
class FirstRead:
    """One new process: construct (+ connect) and the first ``get_tuple``, in ns."""

    construct_ns: int
    first_ns: int


def first_read(request: Request) -> FirstRead:
    """Run the request in a new interpreter; raise ``RuntimeError`` if it fails."""
    done = subprocess.run(
        [sys.executable, "-m", MODULE, json.dumps(dataclasses.asdict(request))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        errors = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise RuntimeError(f"new process failed: {errors[-1]}")
    return FirstRead(**json.loads(lines[-1]))


def _read(request: Request) -> FirstRead:
    """In the new process: open the saver without ``setup()``, read, check the answer."""
    spec = SPECS_BY_NAME[request.saver]
    if spec.tiered:
        importlib.import_module("langgraph_durable")  # imported by name when it opens
    ns, config = request.namespace(), thread_config(request.thread)
    with ExitStack() as stack:
        start = time.perf_counter_ns()
        saver = stack.enter_context(spec.open(ns, setup=False))
        opened = time.perf_counter_ns()
        found = saver.get_tuple(config)
        first = time.perf_counter_ns()
    expect_checkpoint(found, request.checkpoint_id, request.messages, request.writes)
    return FirstRead(opened - start, first - opened)


def main(argv: list[str]) -> int:
    """Read as the request in ``argv[0]`` says; print the durations as JSON."""
    request = Request(**json.loads(argv[0]))
    print(json.dumps(dataclasses.asdict(_read(request))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
