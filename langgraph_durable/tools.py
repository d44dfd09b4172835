"""`durable_tool`: LangChain tools whose side effects happen at most once per call.

Each call is claimed in the saver's tool ledger (Postgres) before the tool runs and its
outcome recorded after, so a resumed graph replays a finished call instead of repeating
it, and a call interrupted by a crash is reported as uncertain and settled by the tool's
policy. The protocol is `_core.ledger.call`, run by the saver's engine; this module
answers the tool effects it yields (`Invoke`, `Verify`, `Ask`), once for blocking and once
for asyncio callers.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, overload

from langchain_core.messages import ToolMessage
from langchain_core.messages.tool import ToolOutputMixin
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import BaseTool, StructuredTool, Tool
from langchain_core.tools import tool as as_tool
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command, interrupt
from pydantic import PrivateAttr, ValidationError

from langgraph_durable._core import ledger as core
from langgraph_durable._core.keys import check_text
from langgraph_durable._core.ledger.keys import derive_key, explicit_key, fingerprint
from langgraph_durable._task import (
    TASK_ID,
    find_saver,
    graph_namespace,
    langgraph_step,
    step_checkpoint,
    task_positions,
)
from langgraph_durable.config import seconds
from langgraph_durable.errors import ConfigurationError, ToolCallError

if TYPE_CHECKING:
    from langgraph_durable._tiers.engine import Engine
    from langgraph_durable.saver import DurableSaver

logger = logging.getLogger("langgraph_durable")

# LangGraph's per-task config keys (private names, stable since langgraph 0.2).
_DURABILITY = "__pregel_durability"

_CURRENT_KEY: ContextVar[str | None] = ContextVar("langgraph_durable_tool_key", default=None)

RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
Verifier = Callable[[str, Any], Any]


def current_idempotency_key() -> str:
    """The idempotency key of the durable tool call running now: pass it downstream (an
    ``Idempotency-Key`` header, a unique column) so a retry with the same key is absorbed.

    Raises:
        ToolCallError: called outside a `durable_tool` call.
    """
    key = _CURRENT_KEY.get()
    if key is None:
        raise ToolCallError("current_idempotency_key() is only available inside a durable_tool")
    return key


@dataclass(frozen=True, slots=True)
class _Options:
    saver: DurableSaver | None
    policy: core.Policy
    verify: Verifier | None
    key: Callable[[Any], str] | None
    retry_on: RetryOn

    def retryable(self, error: BaseException) -> bool:
        if isinstance(self.retry_on, (type, tuple)):
            return isinstance(error, self.retry_on)
        return bool(self.retry_on(error))


class DurableTool(BaseTool):
    """A tool whose calls go through the saver's tool ledger (made by `durable_tool`).

    It has the wrapped tool's name, description and schemas, so models, ``ToolNode`` and
    ``create_agent`` see the same tool; ``ToolRuntime``, state and store injection
    work as for the wrapped tool.
    """

    inner: BaseTool
    _options: _Options = PrivateAttr()

    def __init__(self, inner: BaseTool, options: _Options) -> None:
        super().__init__(
            name=inner.name, description=inner.description, args_schema=inner.args_schema,
            return_direct=inner.return_direct, response_format=inner.response_format,
            inner=inner,
        )
        self._options = options

    # ------------------------------------------------------------ what ToolNode inspects

    def get_input_schema(self, config: RunnableConfig | None = None) -> Any:
        return self.inner.get_input_schema(config)

    @property
    def tool_call_schema(self) -> Any:
        return self.inner.tool_call_schema

    @property
    def func(self) -> Callable[..., Any] | None:
        return getattr(self.inner, "func", None)

    @property
    def coroutine(self) -> Callable[..., Awaitable[Any]] | None:
        return getattr(self.inner, "coroutine", None)

    # -------------------------------------------------------------------------- calling

    def run(self, tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """Run the call through the ledger (``invoke`` lands here): claim it, run the wrapped
        tool, record the outcome — or return the recorded result of a finished call.

        Raises:
            IdempotencyConflictError: the key was used with another tool or other arguments
                (or, with ``on_duplicate="raise"``, a probable duplicate).
            ToolCallInProgressError: another worker holds a live lease on the call.
            ToolOutcomeUncertainError: the call was interrupted mid-way, nothing decided
                its outcome, and the policy is ``"raise"``.
            ToolCallError: a recorded failure whose exception class cannot be rebuilt.
            CorruptStateError: the recorded result fails its checksum.
            ConfigurationError: no `DurableSaver`, or no way to key the call.
            TierUnavailableError: Postgres is unreachable.
            Exception: whatever the wrapped tool raised (live or recorded).
        """
        saver, spec = self._call_spec(tool_input, kwargs.get("config"), kwargs.get("tool_call_id"))
        engine = saver.engine

        def effect(request: Any) -> Any:
            if isinstance(request, core.Invoke):
                with _running(engine, request):
                    try:
                        return core.Returned(self.inner.run(tool_input, *args, **kwargs))
                    except BaseException as exc:
                        return self._raised(exc)
            if isinstance(request, core.Verify):
                return self._verify(request)
            assert isinstance(request, core.Ask)
            return interrupt(request.payload)

        with engine.handling(spec.key):
            result = engine.run(core.call(engine.context, spec), effect)
        return _present(result, kwargs.get("tool_call_id"), self.name)

    async def arun(self, tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """Async twin of `run` (``ainvoke`` lands here)."""
        saver, spec = self._call_spec(tool_input, kwargs.get("config"), kwargs.get("tool_call_id"))
        engine = saver.engine

        async def effect(request: Any) -> Any:
            if isinstance(request, core.Invoke):
                if _blocking(self.inner):
                    return await self._run_in_thread(
                        engine, spec, request, lambda: self.inner.run(tool_input, *args, **kwargs))
                with _running(engine, request):
                    try:
                        return core.Returned(await self.inner.arun(tool_input, *args, **kwargs))
                    except BaseException as exc:
                        return self._raised(exc)
            if isinstance(request, core.Verify):
                return await self._averify(request)
            assert isinstance(request, core.Ask)
            return interrupt(request.payload)

        with engine.handling(spec.key):
            result = await engine.arun(core.call(engine.context, spec), effect)
        return _present(result, kwargs.get("tool_call_id"), self.name)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("DurableTool runs through run()/invoke()")

    async def _run_in_thread(self, engine: Engine, spec: core.CallSpec, request: core.Invoke,
                             work: Callable[[], Any]) -> core.Returned | core.Raised:
        """Run a blocking tool in the event loop's executor, as LangChain would, but keep the
        call this process's until the work has really ended: cancelling the awaiting task
        (a timeout, a client that left) cannot stop a thread, so the call stays handled
        here and its lease keeps beating, and the thread records the outcome itself once
        the work ends. A caller that retries meanwhile waits for it, or replays it."""
        lock, state = threading.Lock(), {"abandoned": False}

        def run() -> core.Returned | core.Raised:
            with engine.handling(request.key), _running(engine, request):
                try:
                    outcome: core.Returned | core.Raised = core.Returned(work())
                except BaseException as exc:
                    outcome = self._raised(exc)
                with lock:
                    abandoned = state["abandoned"]
                if abandoned:
                    self._record_late(engine, spec, request, outcome)
                return outcome

        future = asyncio.get_running_loop().run_in_executor(
            None, contextvars.copy_context().run, run)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            with lock:
                state["abandoned"] = True
                ended = future.done()
            if ended and not future.cancelled() and future.exception() is None:
                # the work ended just before the cancellation reached us: record it here
                outcome = future.result()
                threading.Thread(target=self._record_late, daemon=True,
                                 args=(engine, spec, request, outcome)).start()
            raise

    @staticmethod
    def _record_late(engine: Engine, spec: core.CallSpec, request: core.Invoke,
                     outcome: core.Returned | core.Raised) -> None:
        try:
            engine.run(core.record_outcome(engine.context, spec, request.attempt, outcome))
        except Exception as exc:  # the lease runs out; the call becomes uncertain
            logger.warning("tool call %s (%s) ended after its caller stopped waiting, and "
                           "its outcome could not be recorded: %s", spec.key, spec.tool, exc)

    def _raised(self, error: BaseException) -> core.Raised:
        if isinstance(error, ValidationError):  # bad arguments: the tool did not run
            return core.Raised(error, "error", retryable=True)
        return _raised(error, isinstance(error, Exception) and self._options.retryable(error))

    def _verify(self, request: core.Verify) -> Any:
        assert self._options.verify is not None
        answer = self._options.verify(request.key, request.args)
        if inspect.isawaitable(answer):
            if inspect.iscoroutine(answer):
                answer.close()
            raise ConfigurationError(
                f"verify of {self.name!r} is async: invoke the tool asynchronously")
        return answer

    async def _averify(self, request: core.Verify) -> Any:
        assert self._options.verify is not None
        answer = self._options.verify(request.key, request.args)
        return await answer if inspect.isawaitable(answer) else answer

    # ------------------------------------------------------------------------ identity

    def _call_spec(self, tool_input: str | dict[str, Any], config: RunnableConfig | None,
                   tool_call_id: str | None) -> tuple[DurableSaver, core.CallSpec]:
        """Find the saver and the call's key: explicit ``key=``; else (thread, graph
        namespace, tool_call_id or task id + position, and in a graph task the checkpoint
        its step ran from)."""
        options = self._options
        configurable = ensure_config(config).get("configurable") or {}
        saver = find_saver(options.saver, configurable, f"durable tool {self.name!r}",
                           "pass saver= to durable_tool")
        args = self._model_args(tool_input)
        raw_thread = configurable.get("thread_id")
        thread_id = check_text(raw_thread, "thread_id") if raw_thread is not None else ""
        task_id = configurable.get(TASK_ID)
        ns = graph_namespace(configurable)
        checkpoint = step_checkpoint(configurable)
        call_ref: str | None = None
        if options.key is not None:
            key = explicit_key(options.key(args))
        elif raw_thread is None:
            raise ConfigurationError(
                f"durable tool {self.name!r} was called without a thread_id: run it in a graph "
                "with a thread_id in the config, or give it key=")
        else:
            if tool_call_id:
                call_ref = check_text(tool_call_id, "tool_call_id")
            elif task_id:
                call_ref = f"task:{task_id}:{task_positions.next('tool', configurable)}"
            else:
                raise ConfigurationError(
                    f"durable tool {self.name!r} was called outside a LangGraph task and without "
                    "a tool call id: pass a ToolCall, or give the tool key=")
            key = derive_key(thread_id, ns, call_ref, checkpoint)
        return saver, core.CallSpec(
            key=key, thread_id=thread_id, checkpoint_ns=ns, call_ref=call_ref,
            tool_call_id=tool_call_id, task_id=str(task_id) if task_id else None,
            tool=self.name, args=args, fingerprint=fingerprint(args),
            owner=saver.engine.owner, policy=options.policy,
            decided_by=checkpoint, checkpoint_id=checkpoint if call_ref is not None else None,
            ancestry=tuple((str(n), str(c)) for n, c in (
                configurable.get("checkpoint_map") or {}).items() if n != ns and c),
            # LangGraph writes its durability into the config only when it was given;
            # its default is "async"
            durability=configurable.get(_DURABILITY) or "async",
            run=saver.engine.context.lineage.run(config, make=True),
            step=langgraph_step(ensure_config(config).get("metadata") or {}) if task_id else None,
        )

    def _model_args(self, tool_input: str | dict[str, Any]) -> Any:
        """The arguments the model gave (injected state, store and runtime left out)."""
        if not isinstance(tool_input, dict):
            return tool_input
        names = _arg_names(self.inner)
        return {k: v for k, v in tool_input.items() if k in names}


def _arg_names(tool: BaseTool) -> frozenset[str]:
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        return frozenset((schema.get("properties") or {}).keys())
    fields = getattr(schema, "model_fields", None) or getattr(schema, "__fields__", {})
    return frozenset(fields)


def _blocking(tool: BaseTool) -> bool:
    """Whether ``tool`` has no coroutine of its own: LangChain runs it in a thread."""
    if isinstance(tool, StructuredTool | Tool):
        return tool.coroutine is None
    # a BaseTool subclass that keeps LangChain's own async path
    return inspect.getattr_static(type(tool), "_arun") is inspect.getattr_static(
        BaseTool, "_arun")


def in_ledger(engine: Engine, spec: core.CallSpec, work: Callable[[], Any]) -> Any:
    """Run ``work`` as the ledger call ``spec`` (a policy without ``verify`` or
    ``"interrupt"``): claim, run, record; or replay the recorded result."""

    def effect(request: Any) -> Any:
        assert isinstance(request, core.Invoke), request
        with _running(engine, request):
            try:
                return core.Returned(work())
            except BaseException as exc:
                return _raised(exc)

    with engine.handling(spec.key):
        return engine.run(core.call(engine.context, spec), effect)


async def ain_ledger(engine: Engine, spec: core.CallSpec,
                     work: Callable[[], Awaitable[Any]]) -> Any:
    """Async twin of `in_ledger`."""

    async def effect(request: Any) -> Any:
        assert isinstance(request, core.Invoke), request
        with _running(engine, request):
            try:
                return core.Returned(await work())
            except BaseException as exc:
                return _raised(exc)

    with engine.handling(spec.key):
        return await engine.arun(core.call(engine.context, spec), effect)


def _raised(error: BaseException, retryable: bool = True) -> core.Raised:
    """What a call that raised ``error`` leaves: a pause (a graph bubble-up: runs again on
    resume), an outcome, or nothing (cancelled)."""
    if isinstance(error, GraphBubbleUp):
        return core.Raised(error, "paused")
    if isinstance(error, Exception):
        return core.Raised(error, "error", retryable=retryable)
    return core.Raised(error, "cancelled")


@contextmanager
def _running(engine: Engine, request: core.Invoke) -> Iterator[None]:
    """Expose the call's key to `current_idempotency_key` and keep its lease alive."""
    token = _CURRENT_KEY.set(request.idempotency_key)
    try:
        with engine.leases.track(request.key, request.attempt, request.lease):
            yield
    finally:
        _CURRENT_KEY.reset(token)


def _present(value: Any, tool_call_id: str | None, name: str) -> Any:
    """Shape a live or recorded result for the current call: a recorded ``ToolMessage``
    (or one in a ``Command``) gets this call's id; a bare value a ``ToolMessage`` of its own."""
    if tool_call_id is None:
        return value
    if isinstance(value, ToolMessage):
        if value.tool_call_id == tool_call_id:
            return value
        return value.model_copy(update={"tool_call_id": tool_call_id})
    if isinstance(value, Command):
        update = value.update
        if isinstance(update, dict) and isinstance(update.get("messages"), list):
            tool_messages = [m for m in update["messages"] if isinstance(m, ToolMessage)]
            if len(tool_messages) == 1 and tool_messages[0].tool_call_id != tool_call_id:
                messages = [_present(m, tool_call_id, name) for m in update["messages"]]
                return Command(graph=value.graph, update={**update, "messages": messages},
                               resume=value.resume, goto=value.goto)
        return value
    if isinstance(value, ToolOutputMixin) or (
            isinstance(value, list) and value
            and all(isinstance(v, ToolOutputMixin) for v in value)):
        return value
    content = value if isinstance(value, str) else json.dumps(value, default=str)
    return ToolMessage(content, tool_call_id=tool_call_id, name=name)


# ---------------------------------------------------------------------- the decorator


@overload
def durable_tool(tool: BaseTool | Callable[..., Any], /, *, saver: DurableSaver | None = ...,
                 on_uncertain: core.OnUncertain | None = ..., idempotent: bool = ...,
                 verify: Verifier | None = ..., lease: float | timedelta = ...,
                 wait: float | timedelta | None = ..., key: Callable[[Any], str] | None = ...,
                 retry_on: RetryOn = ..., on_duplicate: core.OnDuplicate = ...,
                 duplicate_window: float | timedelta = ...) -> DurableTool: ...


@overload
def durable_tool(tool: None = None, /, *, saver: DurableSaver | None = ...,
                 on_uncertain: core.OnUncertain | None = ..., idempotent: bool = ...,
                 verify: Verifier | None = ..., lease: float | timedelta = ...,
                 wait: float | timedelta | None = ..., key: Callable[[Any], str] | None = ...,
                 retry_on: RetryOn = ..., on_duplicate: core.OnDuplicate = ...,
                 duplicate_window: float | timedelta = ...,
                 ) -> Callable[[BaseTool | Callable[..., Any]], DurableTool]: ...


def durable_tool(
    tool: BaseTool | Callable[..., Any] | None = None,
    /,
    *,
    saver: DurableSaver | None = None,
    on_uncertain: core.OnUncertain | None = None,
    idempotent: bool = False,
    verify: Verifier | None = None,
    lease: float | timedelta = 30.0,
    wait: float | timedelta | None = None,
    key: Callable[[Any], str] | None = None,
    retry_on: RetryOn = (ConnectionError, TimeoutError),
    on_duplicate: core.OnDuplicate = "warn",
    duplicate_window: float | timedelta = 300.0,
) -> DurableTool | Callable[[BaseTool | Callable[..., Any]], DurableTool]:
    """Make a tool's calls durable: each call's outcome is recorded in the tool ledger under
    an idempotency key, and a resumed graph never repeats a finished side effect.

    Use as ``@durable_tool``, ``@durable_tool(saver=..., ...)`` on a sync or async function
    (which becomes a LangChain tool, as with ``@tool``), or ``durable_tool(existing_tool,
    ...)`` on a `BaseTool`. The result works in ``ToolNode`` and ``create_agent``.

    Args:
        tool: a function or a `BaseTool`.
        saver: the `DurableSaver` whose ledger to use (default: the graph's checkpointer).
        on_uncertain: when a call was interrupted mid-way by a crash and ``verify`` gives no
            verdict: ``"raise"`` `ToolOutcomeUncertainError`, ``"retry"`` with the same key,
            or ``"interrupt"`` the graph for a human. Default ``"retry"`` if ``idempotent``,
            else ``"raise"``.
        idempotent: the downstream API dedupes by `current_idempotency_key`, so retrying
            an uncertain call with the same key is safe.
        verify: ``verify(key, args)`` asks the outside world whether an uncertain call
            happened: ``True``/``"succeeded"``/``("succeeded", result)`` — it did;
            ``False``/``"retry"`` — it did not, run it again; ``"failed"`` /
            ``("failed", message)`` — record a failure; ``None`` — unknown (apply
            ``on_uncertain``). May be async for async invocations.
        lease: seconds a call may run without a heartbeat before others may take it over
            (heartbeats extend it every third of it while the tool runs).
        wait: how long a call waits for another worker's live call with the same key before
            `ToolCallInProgressError` (default: ``lease``).
        key: ``key(args) -> str``: an explicit key (global, not per thread), instead of the
            thread, namespace and tool call id.
        retry_on: exception types (or a predicate) whose failures may be retried when the
            same call runs again (e.g. under a LangGraph ``RetryPolicy``); other failures are
            terminal and are raised again without calling the tool.
        on_duplicate: a new tool call id with the same thread, tool and arguments as a call
            that succeeded within ``duplicate_window``: ``"warn"`` (log, record
            ``duplicate_of``, run), ``"replay"`` (return that call's result), ``"raise"``
            (`IdempotencyConflictError`) or ``"ignore"``.
        duplicate_window: seconds within which such a call counts as a probable duplicate.

    Raises:
        ConfigurationError: an option is invalid.
    """
    options = _options(saver=saver, on_uncertain=on_uncertain, idempotent=idempotent,
                       verify=verify, lease=lease, wait=wait, key=key, retry_on=retry_on,
                       on_duplicate=on_duplicate, duplicate_window=duplicate_window)

    def wrap(target: BaseTool | Callable[..., Any]) -> DurableTool:
        if isinstance(target, DurableTool):
            raise ConfigurationError(f"tool {target.name!r} is already durable")
        inner = target if isinstance(target, BaseTool) else as_tool(target)
        return DurableTool(inner, options)

    return wrap if tool is None else wrap(tool)


def _options(*, saver: DurableSaver | None, on_uncertain: core.OnUncertain | None,
             idempotent: bool, verify: Verifier | None, lease: float | timedelta,
             wait: float | timedelta | None, key: Callable[[Any], str] | None,
             retry_on: RetryOn, on_duplicate: core.OnDuplicate,
             duplicate_window: float | timedelta) -> _Options:
    """`durable_tool`'s options, checked, and the ledger policy they make."""
    if on_uncertain not in (None, "raise", "retry", "interrupt"):
        raise ConfigurationError(f"on_uncertain must be 'raise', 'retry' or 'interrupt', "
                                 f"not {on_uncertain!r}")
    if on_duplicate not in ("warn", "raise", "replay", "ignore"):
        raise ConfigurationError(f"on_duplicate must be 'warn', 'raise', 'replay' or 'ignore', "
                                 f"not {on_duplicate!r}")
    lease_s, window_s = seconds(lease), seconds(duplicate_window)
    wait_s = lease_s if wait is None else seconds(wait)
    if lease_s <= 0 or wait_s < 0 or window_s < 0:
        raise ConfigurationError("lease must be positive; wait and duplicate_window not negative")
    if not callable(retry_on) and not isinstance(retry_on, tuple):
        raise ConfigurationError("retry_on must be exception types or a predicate")
    return _Options(
        saver=saver,
        policy=core.Policy(
            lease=lease_s, wait=wait_s,
            on_uncertain=on_uncertain or ("retry" if idempotent else "raise"),
            verify=verify is not None, on_duplicate=on_duplicate,
            duplicate_window=window_s if on_duplicate != "ignore" and window_s > 0 else None,
        ),
        verify=verify, key=key, retry_on=retry_on,
    )
