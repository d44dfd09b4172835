"""`DurableMiddleware`: every tool of a ``create_agent`` agent durable in one line, and, opt-in,
its model calls recorded and replayed.

    from langchain.agents import create_agent
    from langgraph_durable.middleware import DurableMiddleware

    durable = DurableMiddleware(tools={"charge_card": {"idempotent": True}}, model_calls=True)
    agent = create_agent(model, tools, checkpointer=saver, middleware=[durable])

Needs LangChain 1.x's ``langchain`` package (``create_agent`` and its middleware).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from langgraph_durable.models import input_digest, model_call_spec
from langgraph_durable.tools import DurableTool, ain_ledger, durable_tool, in_ledger

if TYPE_CHECKING:
    from langgraph_durable.saver import DurableSaver

ToolOptions = Mapping[str, Any]


def policy_from_annotations(tool: BaseTool) -> ToolOptions | None:
    """`durable_tool` options from a tool's MCP annotations (``tool.metadata``, where
    langchain-mcp-adapters puts them); ``None``: the tool needs no ledger.

    The annotations are hints from the tool's author, not guarantees:

    - ``readOnlyHint: true`` — no side effect to guard: not durable (a resumed run calls
      it again).
    - ``idempotentHint: true`` — calling it again with the same arguments has no further
      effect: an uncertain call is retried (``on_uncertain="retry"``). The tool is not
      told a key, and the server is not known to dedupe by one.
    - anything else (``destructiveHint``, or no annotation, which MCP reads as destructive)
      — an uncertain call raises `ToolOutcomeUncertainError` for an operator.
    """
    hints = tool.metadata or {}
    if hints.get("readOnlyHint") is True:
        return None
    if hints.get("idempotentHint") is True and hints.get("destructiveHint") is not True:
        return {"on_uncertain": "retry"}
    return {}


class DurableMiddleware(AgentMiddleware):
    """Make an agent's tool calls durable (each through the tool ledger, as `durable_tool`
    does), and, with ``model_calls=True``, record each model call's response and replay it
    when the run comes back to that call.

    Args:
        saver: the `DurableSaver` whose ledger to use (default: the agent's checkpointer).
        tools: `durable_tool` options per tool name (``{"charge_card": {"idempotent":
            True}}``); ``None`` for a tool leaves it as it is (not durable).
        default: options for every other tool (default: `durable_tool`'s own defaults).
        annotations: take each tool's options not named in ``tools`` from its MCP
            annotations (`policy_from_annotations`) instead of ``default``.
        model_calls: record the model's responses and replay them on resume: a resumed
            agent pays no tokens for a step it already ran, and gets the same tool-call ids.

    Tools already made with `durable_tool` keep their own options.

    Raises:
        ConfigurationError: an option is invalid.
    """

    def __init__(self, saver: DurableSaver | None = None, *,
                 tools: Mapping[str, ToolOptions | None] | None = None,
                 default: ToolOptions | None = None, annotations: bool = False,
                 model_calls: bool = False) -> None:
        super().__init__()
        self.saver = saver
        self.model_calls = model_calls
        self._named = dict(tools or {})
        self._default = default
        self._annotations = annotations
        self._durable: dict[int, tuple[BaseTool, BaseTool]] = {}
        for options in (*self._named.values(), default):  # a bad option fails here, not mid-run
            if options is not None:
                durable_tool(saver=saver, **options)

    # ---------------------------------------------------------------------------- tools

    def durable(self, tool: BaseTool) -> BaseTool:
        """The tool as this middleware runs it: durable with its options, or as it is."""
        if isinstance(tool, DurableTool):
            return tool
        held = self._durable.get(id(tool))
        if held is not None and held[0] is tool:
            return held[1]
        if tool.name in self._named:
            options = self._named[tool.name]
        elif self._annotations:
            options = policy_from_annotations(tool)
        else:
            options = self._default if self._default is not None else {}
        made = tool if options is None else durable_tool(tool, saver=self.saver, **options)
        self._durable[id(tool)] = (tool, made)
        return made

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
                       ) -> ToolMessage | Command[Any]:
        """Run the tool call through the ledger."""
        if request.tool is None:
            return handler(request)
        return handler(request.override(tool=self.durable(request.tool)))

    async def awrap_tool_call(
            self, request: ToolCallRequest,
            handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async twin of `wrap_tool_call`."""
        if request.tool is None:
            return await handler(request)
        return await handler(request.override(tool=self.durable(request.tool)))

    # --------------------------------------------------------------------------- models

    def wrap_model_call(self, request: ModelRequest,
                        handler: Callable[[ModelRequest], Any]) -> Any:
        """With ``model_calls``: the recorded response of this call, else the model's,
        recorded."""
        if not self.model_calls:
            return handler(request)
        saver, spec = model_call_spec(self.saver, get_config(), _model_label(request),
                                      _digest(request))
        return _unpack(in_ledger(saver.engine, spec, lambda: _pack(handler(request))))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[Any]],
                               ) -> Any:
        """Async twin of `wrap_model_call`."""
        if not self.model_calls:
            return await handler(request)
        saver, spec = model_call_spec(self.saver, get_config(), _model_label(request),
                                      _digest(request))

        async def call() -> Any:
            return _pack(await handler(request))

        return _unpack(await ain_ledger(saver.engine, spec, call))


def _model_label(request: ModelRequest) -> str:
    model = request.model
    return str(getattr(model, "model_name", None) or type(model).__name__)


def _digest(request: ModelRequest) -> str:
    system = request.system_message.content if request.system_message else None
    tools = sorted(t.name if isinstance(t, BaseTool) else str(t.get("name", t))
                   for t in request.tools)
    return input_digest(request.messages, system, tools)


def _pack(response: Any) -> dict[str, Any]:
    """A model handler's answer as a value the ledger stores (LangGraph's serializer knows
    messages and commands, not LangChain's response classes)."""
    if isinstance(response, AIMessage):
        return {"result": [response]}
    command = None
    if isinstance(response, ExtendedModelResponse):
        command, response = response.command, response.model_response
    return {"result": list(response.result), "structured": response.structured_response,
            "command": command}


def _unpack(stored: dict[str, Any]) -> Any:
    if "structured" not in stored:
        return stored["result"][0]
    response = ModelResponse(result=stored["result"],
                             structured_response=stored["structured"])
    if stored["command"] is not None:
        return ExtendedModelResponse(model_response=response, command=stored["command"])
    return response


__all__ = ["DurableMiddleware", "policy_from_annotations"]
