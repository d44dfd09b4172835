"""One history per thread, with nothing added to the configs a caller receives.

A LangGraph run reads its thread once (`get_tuple`) and then writes a line of checkpoints,
each the child of the one before (`put`). Whether such a put must extend its namespace's
head (a compare-and-set: it commits only while its parent is still the head) or may fork
(the caller asked for a past checkpoint) depends on how its caller read the thread:

- a read of the *latest* checkpoint: the put extends the head. Two runs that read the same
  head cannot both commit on it: the second gets `ThreadConflictError`. A read that found
  the namespace empty makes a root put "this namespace has no head yet": of two first runs
  of a new thread, the second to commit gets the conflict.
- a read *by id* (time travel, ``update_state`` or ``invoke`` with a ``checkpoint_id``): the
  caller asked for that checkpoint, so the first put from it forks and is never refused
  (a live run writing from the same parent gets the conflict at its next write instead).
  LangGraph then checks whether the addressed checkpoint was superseded, with a read of
  the latest whose config names ``checkpoint_id`` without a value; that read keeps the
  fork. Any other read of the latest decides again: it extends.
- every later put of the caller extends the checkpoint the caller itself wrote last.

Who "the caller" is: a LangGraph run is told by the runtime object LangGraph places in the
config of every read and write of one run; a call outside a run (the saver's own API,
``update_state``) by the asyncio task or the thread it runs in. `Lineage` keeps each
caller's marks for as long as the caller lives: a run's until LangGraph lets go of its
runtime object, a task's or thread's until it ends, however many other runs this process
serves meanwhile. A caller's own marks are bounded (``size``, its most recent reads and
writes): a mark pushed out by the caller's own newer ones only makes a put from it
uncompared. A put whose parent its caller never read (a direct call) is taken as the
caller's choice and not compared, as every other saver does.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping

from langchain_core.runnables import RunnableConfig

# The configurable key under which LangGraph passes a run's runtime object to the saver:
# the same object in every read and write of one run (including a subgraph's own loop).
RUN_KEY = "__pregel_runtime"

# The mark of a namespace read empty (its root put is "no head yet").
_EMPTY = ""

class Marks:
    """One caller's marks: which checkpoints its puts extend (compared) or fork from, and
    the namespaces where a put of its failed (`put_failed`)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._marks: OrderedDict[tuple[str, str, str], bool] = OrderedDict()
        self._failed: dict[tuple[str, str], tuple[str, str]] = {}

    def read(
        self, thread_id: str, ns: str, checkpoint_id: str | None, *, latest: bool,
        check: bool = False,
    ) -> None:
        """The caller read ``checkpoint_id`` (``None``: the namespace is empty) as the latest
        (it will extend it) or by its id (it will fork from it). ``check``: a read of the
        latest made to check an addressed checkpoint (its config names ``checkpoint_id``
        without a value), which keeps a fork the caller asked for."""
        if checkpoint_id is None and not latest:
            return
        key = (thread_id, ns, _EMPTY if checkpoint_id is None else checkpoint_id)
        with self._lock:
            if checkpoint_id is not None:  # the namespace is not empty (any more)
                self._marks.pop((thread_id, ns, _EMPTY), None)
            if latest and check and key in self._marks:
                self._marks.move_to_end(key)
                return
            self._set(key, latest)

    def wrote(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """The caller wrote ``checkpoint_id``: its next put extends it (and the namespace is
        no longer one it found empty)."""
        with self._lock:
            self._marks.pop((thread_id, ns, _EMPTY), None)
            self._set((thread_id, ns, checkpoint_id), True)

    def extends(self, thread_id: str, ns: str, parent_id: str | None) -> bool:
        """Whether a put from ``parent_id`` (``None``: a root) must find it still the head
        (for a root: no head yet)."""
        key = (thread_id, ns, _EMPTY if parent_id is None else parent_id)
        with self._lock:
            return self._marks.get(key, False)

    def put_failed(self, thread_id: str, ns: str, checkpoint_id: str, why: str) -> None:
        """A put of the caller failed. Under ``durability="async"`` a LangGraph run puts
        each checkpoint of a namespace after the one before has been stored, and puts none
        after one failed: none of its later checkpoints there is on its way (`unstored`)."""
        with self._lock:
            self._failed[thread_id, ns] = (checkpoint_id, why)

    def put_stored(self, thread_id: str, ns: str) -> None:
        """A put of the caller succeeded: its checkpoints of the namespace are on their way
        again."""
        if self._failed:  # a look without the lock: most callers never failed
            with self._lock:
                self._failed.pop((thread_id, ns), None)

    def unstored(self, thread_id: str, checkpoints: Mapping[str, str]) -> tuple[str, str] | None:
        """Of the namespaces of ``checkpoints`` (namespace -> id), the first where a put of
        the caller failed since its last stored one: the checkpoint that failed, and why.
        A checkpoint there not in Postgres now never will be (`put_failed`)."""
        with self._lock:
            return next((self._failed[thread_id, ns] for ns in checkpoints
                         if (thread_id, ns) in self._failed), None)

    def _set(self, key: tuple[str, str, str], extends: bool) -> None:
        self._marks[key] = extends
        self._marks.move_to_end(key)
        while len(self._marks) > self.size:
            self._marks.popitem(last=False)

    def forked(self) -> None:
        self._lock = threading.Lock()


class Lineage:
    """Each caller's `Marks`, kept while the caller lives."""

    def __init__(self, size: int = 4_096, sweep_at: int = 256) -> None:
        self.size = size  # marks per caller
        self.sweep_at = sweep_at  # callers held before the ended ones are looked for
        self._lock = threading.Lock()
        self._callers: dict[int, tuple[object, Marks]] = {}  # id(caller) -> (holder, marks)
        self._next_sweep = sweep_at

    def caller(self, config: RunnableConfig | None) -> Marks:
        """The marks of the caller making a call: the LangGraph run whose runtime object
        rides in ``config``, else the current asyncio task, else the current thread."""
        runtime = ((config or {}).get("configurable") or {}).get(RUN_KEY)
        if runtime is not None:
            return self._marks(runtime, runtime)
        try:
            task: object | None = asyncio.current_task()
        except RuntimeError:  # no running loop in this thread
            task = None
        owner = task if task is not None else threading.current_thread()
        return self._marks(owner, weakref.ref(owner))

    def run(self, config: RunnableConfig | None, *, make: bool = False) -> Marks | None:
        """The marks of the whole LangGraph run a call belongs to, its subgraphs' loops and
        its tasks included (their runtime objects are copies of the run's, and share its
        ``control``, made once per run), for what holds across them (`Marks.put_failed`);
        None outside a run, for a LangGraph without run control, or, unless ``make``, for
        a run that has none yet (most never do: a failed put or a durable tool makes
        them, so a put that succeeds only looks)."""
        runtime = ((config or {}).get("configurable") or {}).get(RUN_KEY)
        control = getattr(runtime, "control", None)
        if control is None:
            return None
        return self._marks(control, control) if make else self._known(control)

    def _known(self, owner: object) -> Marks | None:
        """``owner``'s marks, if it has any."""
        with self._lock:
            entry = self._callers.get(id(owner))
            return entry[1] if entry is not None and _held(entry) is owner else None

    def _marks(self, owner: object, holder: object) -> Marks:
        """``owner``'s marks; ``holder`` keeps its id from going to another object while
        its marks count (the runtime itself, or a weak reference to a task or thread)."""
        with self._lock:
            entry = self._callers.get(id(owner))
            if entry is not None and _held(entry) is owner:
                return entry[1]
            marks = Marks(self.size)
            self._callers[id(owner)] = (holder, marks)
            if len(self._callers) >= self._next_sweep:
                self._sweep()
            return marks

    def _sweep(self) -> None:
        """Forget the callers that ended: runs whose runtime object only the lineage still
        holds, tasks and threads that were freed. Live callers stay, however many: the
        next sweep comes once as many again were added."""
        for key, entry in list(self._callers.items()):
            if _held(entry) is None:
                del self._callers[key]
        self._next_sweep = max(self.sweep_at, 2 * len(self._callers))

    def callers(self) -> int:
        """How many callers' marks are held (the ended ones go at the next sweep)."""
        return len(self._callers)

    def forked(self) -> None:
        """In a child after ``fork()``: new locks (another thread may have held them)."""
        self._lock = threading.Lock()
        for _, marks in list(self._callers.values()):
            marks.forked()


def _held(entry: tuple[object, Marks]) -> object | None:
    """The caller an entry holds, ``None`` once it ended: a weak reference's referent (a
    task, a thread), or a runtime object someone besides the lineage still refers to."""
    if isinstance(entry[0], weakref.ref):
        return entry[0]()
    # no local name for the runtime here: it would be one more reference
    return entry[0] if sys.getrefcount(entry[0]) > _OWN_REFS else None


def _own_refs() -> int:
    """What `sys.getrefcount` counts for a runtime object only an entry holds (the entry's
    slot and the call's argument), measured the way `_held` counts."""
    entry = (object(), Marks(1))
    return sys.getrefcount(entry[0])


_OWN_REFS = _own_refs()
