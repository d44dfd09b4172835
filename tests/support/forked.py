"""Worker processes forked from one server that imported LangGraph and the package once.

Crash tests start and SIGKILL hundreds of real processes; importing LangGraph costs each
fresh interpreter seconds on a busy machine. `start` forks a child of a `forkserver` that
preloaded the worker modules, so a worker is running in milliseconds. The child is an
ordinary process of its own (own connections, own pid): ``proc.kill()`` sends SIGKILL.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["tests.support.chaos_worker", "tests.support.kill_point_worker",
                                 "tests.support.killed_patterns_worker",
                                 "tests.support.checker.worker",
                                 "tests.support.checker.drain_loop"])


def start(target: Callable[..., Any], *args: Any) -> BaseProcess:
    """Run ``target(*args)`` in a new forked worker process; ``target`` must be a
    module-level function of a preloaded module."""
    proc = _CONTEXT.Process(target=target, args=args, daemon=True)
    proc.start()
    return proc
