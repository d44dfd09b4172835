"""One history per thread, with nothing added to the configs a caller receives.

A LangGraph run reads its thread once (`get_tuple`) and then writes a line of checkpoints,
each the child of the one before (`put`). Whether such a put must extend its namespace's
head (a compare-and-set: it commits only while its parent is still the head) or may fork
(the caller asked for a past checkpoint) depends on how the run read its thread:

- a read of the *latest* checkpoint: the run extends the head. Two runs that read the same
  head cannot both commit on it: the second gets `ThreadConflictError`.
- a read *by id* (time travel, ``update_state`` or ``invoke`` with a ``checkpoint_id``): the
  caller asked for that checkpoint, so the first put from it forks and is never refused
  (a live run writing from the same parent gets the conflict at its next write instead),
  even when the checkpoint was the head and the same caller then reads the latest
  (``update_state`` reads both ways before it writes).
- every later put of the run extends the checkpoint the run itself wrote last.

`Lineage` remembers those facts in this process, keyed by the run and the checkpoint. A
run is told by the runtime object LangGraph places in the config of every read and write
of one run (held while its marks count: a freed object's id goes to the next one made);
calls made outside a run (the saver's own API, ``update_state``) share one key.
A put whose parent this process never read (a direct call) is taken as the caller's choice
and not compared, as every other saver does. The memory is bounded: a mark pushed out by
``size`` newer ones is forgotten, which only makes that run's next put uncompared.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict

from langchain_core.runnables import RunnableConfig

# The configurable key under which LangGraph passes a run's runtime object to the saver:
# the same object in every read and write of one run (including a subgraph's own loop).
RUN_KEY = "__pregel_runtime"

_Mark = tuple[int, str, str, str]  # (run, thread, namespace, checkpoint id)




class Lineage:
    """Which checkpoints each run of this process extends (compared puts) or forks from."""

    def __init__(self, size: int = 50_000, runs: int = 256) -> None:
        self.size = size
        self.runs = runs
        self._lock = threading.Lock()
        self._marks: OrderedDict[_Mark, bool] = OrderedDict()
        # id(runtime) -> (runtime, its run token): the runtime is held, so no other object
        # takes its id while its marks count (an object's id is reused once it is freed)
        self._runtimes: OrderedDict[int, tuple[object, int]] = OrderedDict()
        self._tokens = itertools.count(1)

    def run_of(self, config: RunnableConfig | None) -> int:
        """The token of the LangGraph run making a call (0 outside a run): one per runtime
        object. A run pushed out by ``runs`` newer ones gets a new token if it comes back,
        which only makes its next put uncompared."""
        runtime = ((config or {}).get("configurable") or {}).get(RUN_KEY)
        if runtime is None:
            return 0
        with self._lock:
            entry = self._runtimes.get(id(runtime))
            if entry is None or entry[0] is not runtime:
                entry = (runtime, next(self._tokens))
                self._runtimes[id(runtime)] = entry
            self._runtimes.move_to_end(id(runtime))
            while len(self._runtimes) > self.runs:
                self._runtimes.popitem(last=False)
            return entry[1]

    def read(self, run: int, thread_id: str, ns: str, checkpoint_id: str, *, latest: bool) -> None:
        """A run read ``checkpoint_id``: as the latest (it will extend it, unless the run
        addressed it by id before) or by its id (it will fork from it)."""
        with self._lock:
            key = (run, thread_id, ns, checkpoint_id)
            if latest and key in self._marks:
                self._marks.move_to_end(key)
                return
            self._set(key, latest)

    def wrote(self, run: int, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """A run wrote ``checkpoint_id``: its next put extends it."""
        with self._lock:
            self._set((run, thread_id, ns, checkpoint_id), True)

    def extends(self, run: int, thread_id: str, ns: str, parent_id: str | None) -> bool:
        """Whether a put from ``parent_id`` must find it still the head."""
        if parent_id is None:
            return False
        with self._lock:
            return self._marks.get((run, thread_id, ns, parent_id), False)

    def _set(self, key: _Mark, extends: bool) -> None:
        self._marks[key] = extends
        self._marks.move_to_end(key)
        while len(self._marks) > self.size:
            self._marks.popitem(last=False)

    def forked(self) -> None:
        """In a child after ``fork()``: a new lock (another thread may have held it)."""
        self._lock = threading.Lock()
