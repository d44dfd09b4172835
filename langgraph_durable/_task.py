"""What a durable call made in a running LangGraph task knows of itself: the saver it
uses, the graph namespace it runs in, the checkpoint its step ran from, its step, and its
position among the task's calls of its kind. Shared by `durable_tool`, `durable_model`
and `DurableMiddleware`."""

from __future__ import annotations

import inspect
import threading
import weakref
from typing import TYPE_CHECKING, Any

from langgraph.constants import CONFIG_KEY_CHECKPOINTER

from langgraph_durable.errors import ConfigurationError

if TYPE_CHECKING:
    from langgraph_durable.saver import DurableSaver

# LangGraph's per-task config keys (private names, stable since langgraph 0.2).
TASK_ID = "__pregel_task_id"
_READ = "__pregel_read"
_RUNTIME = "__pregel_runtime"


class _Positions:
    """Where each call of a running LangGraph task stands among the task's calls of its kind
    (``"tool"``, ``"model"``), counted from 0 in the order the task makes them.

    The count hangs on an object LangGraph makes anew for each execution of a task (its
    read function, ``__pregel_read``), held weakly, and on the attempt under a
    ``RetryPolicy`` (``node_attempt``): it survives LangChain running a call in a copied
    context (a ``RunnableLambda``, a chain), where a ``ContextVar`` set inside would be
    lost, and it starts afresh when the step runs again (a retry, a resume), so a re-run's
    calls get the positions, hence the keys, they had.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: weakref.WeakKeyDictionary[object, dict[tuple[str, object], int]] = (
            weakref.WeakKeyDictionary())

    def next(self, kind: str, configurable: dict[str, Any]) -> int:
        """The position of this call of ``kind`` in the running task.

        Raises:
            ConfigurationError: not inside a LangGraph task.
        """
        anchor = configurable.get(_READ)
        if anchor is None:
            raise ConfigurationError(
                f"a durable {kind} call without a tool call id runs inside a LangGraph task")
        runtime = configurable.get(_RUNTIME)
        attempt = getattr(getattr(runtime, "execution_info", None), "node_attempt", None)
        with self._lock:
            counts = self._counts.setdefault(anchor, {})
            position = counts.get((kind, attempt), 0)
            counts[kind, attempt] = position + 1
        return position


task_positions = _Positions()


def find_saver(explicit: DurableSaver | None, configurable: dict[str, Any], what: str,
               how: str) -> DurableSaver:
    """The `DurableSaver` a call uses: ``explicit``, else the graph's checkpointer.

    Raises:
        ConfigurationError: neither is a `DurableSaver` (``what`` needs one; ``how`` says
            how to give it).
    """
    from langgraph_durable.saver import DurableSaver

    saver = explicit or _wrapped_saver(configurable.get(CONFIG_KEY_CHECKPOINTER))
    if not isinstance(saver, DurableSaver):
        raise ConfigurationError(
            f"{what} needs a DurableSaver: {how} or compile the graph with "
            "checkpointer=DurableSaver(...) (under LangGraph's server: name "
            "langgraph_durable.server.checkpointer in langgraph.json)")
    return saver


def step_checkpoint(configurable: dict[str, Any]) -> str | None:
    """The id of the checkpoint the running task's step ran from (``None`` outside a graph
    task): what LangGraph derives the task's id from."""
    if not configurable.get(TASK_ID):
        return None
    found = (configurable.get("checkpoint_map") or {}).get(graph_namespace(configurable))
    return str(found) if found else None


def graph_namespace(configurable: dict[str, Any]) -> str:
    """The checkpoint namespace of the graph a task runs in (its own namespace, which ends
    with ``:<task id>``, cut back to its graph's)."""
    task_id = configurable.get(TASK_ID)
    ns = str(configurable.get("checkpoint_ns") or "")
    if task_id and ns.endswith(f":{task_id}"):
        ns = ns.rpartition("|")[0]
    return ns


_WRAPPED = ("_inner",)
"""Attributes in which a checkpointer that wraps another keeps it: LangGraph's server hands
tasks an adapter that holds the checkpointer of ``langgraph.json`` in ``_inner``."""


def _wrapped_saver(checkpointer: object) -> object:
    """The `DurableSaver` a graph's checkpointer is or wraps (else the checkpointer).

    Looked up by attribute, never by the wrapper's type, so that the server's packages are
    never imported; static lookup, so that a wrapper which forwards unknown attributes to
    what it wraps (``__getattr__``) is not asked for them.
    """
    from langgraph_durable.saver import DurableSaver

    found = checkpointer
    for _ in range(4):  # a wrapper of a wrapper, at most a few deep
        if found is None or isinstance(found, DurableSaver):
            break
        inner = next((value for name in _WRAPPED
                      if (value := inspect.getattr_static(found, name, None)) is not None), None)
        if inner is None:
            break
        found = inner
    return found if isinstance(found, DurableSaver) else checkpointer


def langgraph_step(metadata: dict[str, Any]) -> int | None:
    """The LangGraph step a task runs in (``langgraph_step`` in its config's metadata)."""
    step = metadata.get("langgraph_step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None
