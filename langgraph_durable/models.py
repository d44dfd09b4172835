"""Model calls that are paid once: each response recorded in the tool ledger, replayed on resume.

A resumed node calls its model again: the tokens are paid again, and the model answers
differently, with new tool-call ids, so the tools it asks for come under new keys. With
`durable_model` (or `DurableMiddleware(model_calls=True)` in a ``create_agent`` agent)
the response of every model call made in a graph task is recorded in the ledger when the
call returns. A run that comes back to the same call — the same thread, namespace, step,
node and position in the task, with the same input — gets the recorded response instead
of calling the model: the same message, the same tool-call ids, no tokens.

The input is part of the call's identity (a digest of the messages, the system prompt,
and the tools offered, leaving out message and tool-call ids, which change when a lost
checkpoint is made again): a fork whose state was edited asks the model afresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage, convert_to_messages
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

from langgraph_durable._core import ledger as core
from langgraph_durable._core.keys import check_text
from langgraph_durable._core.ledger.keys import derive_key, fingerprint
from langgraph_durable._task import (
    find_saver,
    graph_namespace,
    langgraph_step,
    step_checkpoint,
    task_positions,
)
from langgraph_durable.errors import ConfigurationError
from langgraph_durable.tools import ain_ledger, in_ledger

if TYPE_CHECKING:
    from langgraph_durable.saver import DurableSaver

# A model call's lease: long enough for a slow completion between heartbeats (a third of it).
MODEL_LEASE = 60.0

# A model call cut off mid-way is asked again: it has no side effect but its cost.
_POLICY = core.Policy(lease=MODEL_LEASE, wait=MODEL_LEASE, on_uncertain="retry", verify=False,
                      on_duplicate="ignore", duplicate_window=None)



def input_digest(messages: Sequence[Any], *extra: Any) -> str:
    """What a model was asked, as a digest that leaves out message and tool-call ids (a
    checkpoint made again after a crash gives its messages new ones)."""
    parts = [_message_content(m) for m in convert_to_messages(messages)]
    return fingerprint([parts, *extra])


def _message_content(message: BaseMessage) -> dict[str, Any]:
    content: dict[str, Any] = {"type": message.type, "content": message.content}
    if message.name:
        content["name"] = message.name
    calls = getattr(message, "tool_calls", None)
    if calls:
        content["tool_calls"] = [[c["name"], c["args"]] for c in calls]
    status = getattr(message, "status", None)
    if status and status != "success":
        content["status"] = status
    return content


def model_call_spec(saver: DurableSaver | None, config: RunnableConfig, model: str,
                    digest: str) -> tuple[DurableSaver, core.CallSpec]:
    """The saver and the ledger call of one model call in the running graph task.

    Raises:
        ConfigurationError: no `DurableSaver`, or the call runs outside a graph task with a
            thread id.
    """
    configurable = config.get("configurable") or {}
    found = find_saver(saver, configurable, "a durable model call", "pass saver=")
    metadata = config.get("metadata") or {}
    thread = configurable.get("thread_id")
    step, node = langgraph_step(metadata), metadata.get("langgraph_node")
    if thread is None or step is None or not configurable.get("__pregel_task_id"):
        raise ConfigurationError(
            "a durable model call runs inside a graph node with a thread_id in the config")
    thread_id, ns = check_text(thread, "thread_id"), graph_namespace(configurable)
    position = task_positions.next("model", configurable)
    call_ref = f"model:{node}:{step}:{position}:{digest[:32]}"
    checkpoint = step_checkpoint(configurable)
    return found, core.CallSpec(
        key=derive_key(thread_id, ns, call_ref, checkpoint), thread_id=thread_id,
        checkpoint_ns=ns, checkpoint_id=checkpoint,
        call_ref=call_ref, tool_call_id=None, task_id=str(configurable["__pregel_task_id"]),
        tool=f"model:{model}", args={"input": digest}, fingerprint=digest,
        owner=found.engine.owner, policy=_POLICY, step=step,
    )


def durable_model(model: Runnable[Any, Any], *, saver: DurableSaver | None = None,
                  name: str | None = None) -> Runnable[Any, Any]:
    """A model whose calls inside graph nodes are recorded in the ledger and replayed.

    ``model`` is a chat model, usually with its tools bound
    (``durable_model(ChatOpenAI(...).bind_tools(tools))``); call the result as you would
    call it. Each call made in a graph task is one ledger record (tool name
    ``"model:<name>"``); a call made again with the same input in the same thread,
    namespace, step, node and position returns the recorded message.

    Args:
        model: the runnable to call (its input: messages, a prompt value or a string).
        saver: the `DurableSaver` whose ledger records the calls (default: the graph's
            checkpointer).
        name: the name recorded with each call (default: the model's type name).
    """
    label = name or _model_name(model)

    def call(messages: Any, config: RunnableConfig) -> Any:
        found, spec = model_call_spec(saver, config, label, input_digest(_messages(messages)))
        return in_ledger(found.engine, spec, lambda: model.invoke(messages, config))

    async def acall(messages: Any, config: RunnableConfig) -> Any:
        found, spec = model_call_spec(saver, config, label, input_digest(_messages(messages)))
        return await ain_ledger(found.engine, spec, lambda: model.ainvoke(messages, config))

    return RunnableLambda(call, afunc=acall, name=f"durable_model({label})")


def _messages(value: Any) -> Sequence[Any]:
    if isinstance(value, PromptValue):
        return value.to_messages()
    if isinstance(value, str):
        return [("human", value)]
    return list(value)


def _model_name(model: Any) -> str:
    bound = getattr(model, "bound", model)  # a RunnableBinding (bind_tools) wraps its model
    return str(getattr(bound, "model_name", None) or getattr(bound, "model", None)
               or type(bound).__name__)


__all__ = ["durable_model", "input_digest", "model_call_spec"]
