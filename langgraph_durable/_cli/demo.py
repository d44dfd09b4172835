"""``langgraph-durable demo``: an agent is killed after it charged a card, and resumes.

The agent is a two-node ReAct loop (``agent`` -> ``tools`` -> ``agent``) over a scripted
chat model, so it needs no API key or network. Its first turn asks for two tool calls at
once: ``charge_card`` (a side effect, wrapped with `durable_tool`) and
``estimate_delivery`` (slow and read-only). The demo runs the agent in a worker process,
waits until the ledger recorded the charge, and sends the worker SIGKILL while the slow
call is still in flight. LangGraph had not saved the ``tools`` step, so a resumed run
executes that step again: the ledger answers ``charge_card`` with the recorded result
instead of charging a second time. The payment provider's own statement (a file the
tool appends to) shows one charge.

The worker is this module: ``python -m langgraph_durable._cli.demo THREAD SCHEMA PREFIX
BANK_FILE SLOW [--resume]``, with the servers in ``LGD_REDIS_URL`` / ``LGD_POSTGRES_URL``.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from langgraph_durable._cli import queries, views
from langgraph_durable._tiers.probes import hot_view
from langgraph_durable.config import mask_url
from langgraph_durable.ledger import Ledger
from langgraph_durable.saver import DurableSaver
from langgraph_durable.tools import current_idempotency_key, durable_tool

if TYPE_CHECKING:
    from langgraph_durable._cli.target import Target

ORDER_ID = "A-1001"
CENTS = 4200
REQUEST = f"Please charge order {ORDER_ID} (${CENTS / 100:.2f}) and tell me when it arrives."
WORKER_TIMEOUT = 120.0


def say(text: str) -> None:
    """Print one progress line of the worker (the parent shows it)."""
    print(text, flush=True)


class ScriptedChatModel(BaseChatModel):
    """A chat model that follows a two-turn script and needs no network.

    Turn 1 (no tool results yet) asks for ``charge_card`` and ``estimate_delivery`` at
    once; turn 2 answers with their results. Tool call ids are fixed, so a resumed run
    sees the same calls (the ledger's key is thread, namespace and tool call id).
    """

    order_id: str = ORDER_ID
    cents: int = CENTS

    @property
    def _llm_type(self) -> str:
        return "scripted-demo"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | None = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """The script already names its tools; binding changes nothing."""
        return cast("Runnable[LanguageModelInput, AIMessage]", self)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        results = {m.name: str(m.content) for m in messages if isinstance(m, ToolMessage)}
        if not results:
            say(f"model: charge order {self.order_id} and ask the carrier, in parallel")
            message = AIMessage(content="", tool_calls=[
                {"name": "charge_card", "args": {"order_id": self.order_id, "cents": self.cents},
                 "id": f"call_charge_{self.order_id}", "type": "tool_call"},
                {"name": "estimate_delivery", "args": {"order_id": self.order_id},
                 "id": f"call_estimate_{self.order_id}", "type": "tool_call"},
            ])
        else:
            say("model: writing the final answer")
            message = AIMessage(content=(
                f"Order {self.order_id} is paid ({results.get('charge_card')}); "
                f"{results.get('estimate_delivery')}."))
        return ChatResult(generations=[ChatGeneration(message=message)])


def build_agent(saver: DurableSaver, bank: Path, slow: float) -> CompiledStateGraph[Any]:
    """The demo agent on ``saver``; ``charge_card`` appends each real charge to ``bank``.

    """
    def charge_card(order_id: str, cents: int) -> str:
        """Charge the customer's card for an order (a call to the payment provider)."""
        receipt = f"rcpt-{uuid.uuid4().hex[:8]}"
        with bank.open("a") as statement:
            statement.write(json.dumps({
                "order_id": order_id, "cents": cents, "receipt": receipt, "pid": os.getpid(),
                "idempotency_key": current_idempotency_key(),
            }) + "\n")
        say(f"charge_card: the payment provider charged ${cents / 100:.2f}, receipt {receipt}")
        return f"charged ${cents / 100:.2f}, receipt {receipt}"

    @tool
    def estimate_delivery(order_id: str) -> str:
        """Ask the carrier when an order arrives (slow and read-only: no ledger needed)."""
        say(f"estimate_delivery: asking the carrier about {order_id} (takes {slow:g}s)")
        time.sleep(slow)
        return "it arrives in 2 days"

    tools: list[BaseTool] = [durable_tool(charge_card, saver=saver), estimate_delivery]
    model = ScriptedChatModel().bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def worker(argv: Sequence[str]) -> int:
    """Run (or with ``--resume``, resume) the demo agent; the worker process's main."""
    thread_id, schema, prefix, bank, slow = argv[:5]
    resume = "--resume" in argv[5:]
    with DurableSaver(schema=schema, key_prefix=prefix) as saver:
        graph = build_agent(saver, Path(bank), float(slow))
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        say(f"worker pid {os.getpid()}: {'resuming' if resume else 'starting'} {thread_id}")
        inputs = None if resume else {"messages": [HumanMessage(REQUEST)]}
        result = graph.invoke(inputs, config, durability="sync")
        say(f"final answer: {result['messages'][-1].content}")
    return 0


# -------------------------------------------------------------------------- the parent


class _Worker:
    """A worker process whose output lines arrive on a queue."""

    def __init__(self, target: Target, thread_id: str, bank: Path, slow: float,
                 log: Path, *, resume: bool) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "LGD_REDIS_URL": str(target.redis_url),
               "LGD_POSTGRES_URL": str(target.postgres_url)}
        args = [sys.executable, "-m", "langgraph_durable._cli.demo", thread_id, target.schema,
                target.prefix, str(bank), str(slow), *(["--resume"] if resume else [])]
        self.log = log
        with log.open("ab") as stderr:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, env=env,
                                         text=True, stdin=subprocess.DEVNULL)
        self.lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def drain(self, console: Console, label: str) -> bool:
        """Print the lines received so far; False once the output ended."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return True
            if line is None:
                return False
            console.print(f"  [dim]{label} │[/] {escape(line)}")

    def stderr_tail(self, lines: int = 15) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def _charge_recorded(ledger: Ledger, thread_id: str) -> bool:
    return any(r.tool == "charge_card" and r.status == "succeeded"
               for r in ledger.list(thread_id))


def _run_until_charged(console: Console, job: _Worker, ledger: Ledger, thread_id: str) -> bool:
    """Show the worker's output; SIGKILL it once the ledger holds the charge."""
    deadline = time.monotonic() + WORKER_TIMEOUT
    while time.monotonic() < deadline:
        job.drain(console, f"worker {job.proc.pid}")
        if _charge_recorded(ledger, thread_id) and job.proc.poll() is None:
            os.kill(job.proc.pid, signal.SIGKILL)
            job.proc.wait()
            job.drain(console, f"worker {job.proc.pid}")
            console.print(f"  [bold red]✝ SIGKILL[/] worker {job.proc.pid}: the ledger holds the "
                          "charge, estimate_delivery is still in flight, the run is not finished")
            return True
        if job.proc.poll() is not None:
            job.drain(console, f"worker {job.proc.pid}")
            console.print(f"[red]the worker ended (exit {job.proc.returncode}) before the charge "
                          f"was recorded[/]\n{job.stderr_tail()}")
            return False
        time.sleep(0.02)
    job.proc.kill()
    console.print("[red]the worker did not record the charge in time[/]")
    return False


def _statement(bank: Path) -> list[dict[str, Any]]:
    if not bank.exists():
        return []
    return [json.loads(line) for line in bank.read_text().splitlines() if line.strip()]


def _statement_table(charges: list[dict[str, Any]]) -> Table:
    table = Table(title="the payment provider's statement", title_justify="left")
    for column in ("order", "amount", "receipt", "charged by pid", "idempotency key"):
        table.add_column(column)
    for c in charges:
        table.add_row(c["order_id"], f"${c['cents'] / 100:.2f}", c["receipt"], str(c["pid"]),
                      views.clip(str(c.get("idempotency_key")), 40))
    return table


def run_demo(console: Console, target: Target, *, embedded_dir: Path | None,
             slow: float) -> bool:
    """Run the demo on the target's servers; return whether every check passed."""
    thread_id = f"order-{uuid.uuid4().hex[:6]}"
    workdir = Path(tempfile.mkdtemp(prefix="lgd-demo-"))
    bank, log = workdir / "payment-provider.jsonl", workdir / "workers.log"
    console.rule("[bold]langgraph-durable demo: kill an agent mid-run, resume it")
    console.print(views.note("what happens", "\n".join([
        f"An agent handles “{REQUEST}”",
        "It calls charge_card (a side effect, through the tool ledger) and estimate_delivery "
        "(slow) in one step. Its worker process is killed with SIGKILL after the charge and "
        "before the step finished; a new process resumes the thread from its checkpoint.",
    ])))
    where = "embedded servers in " + str(embedded_dir) if embedded_dir else "your servers"
    console.print(f"servers: {escape(where)}\n"
                  f"  redis    {escape(mask_url(str(target.redis_url)))}\n"
                  f"  postgres {escape(mask_url(str(target.postgres_url)))}\n"
                  f"  schema {target.schema!r}, key prefix {target.prefix!r}, thread {thread_id!r}")
    saver = target.saver()
    try:
        saver.setup()
        ledger = saver.ledger
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}

        console.rule("1 · run the agent in a worker process")
        if not _run_until_charged(console, _Worker(target, thread_id, bank, slow, log,
                                                   resume=False), ledger, thread_id):
            return False

        console.rule("2 · what survived the SIGKILL")
        survived = saver.get_tuple(config)
        if survived is None:
            console.print("[red]no checkpoint survived[/]")
            return False
        resumed_from = survived.config["configurable"]["checkpoint_id"]
        console.print(views.checkpoint_view(survived))
        console.print(views.ledger_table("the tool ledger", ledger.list(thread_id)))
        console.print(_statement_table(_statement(bank)))
        console.print("Lost with the process: the tools step (LangGraph saves a step's result "
                      "when the step ends). A resumed run executes it again.")

        console.rule("3 · resume in a new process")
        console.print(f"resuming thread {thread_id!r} from checkpoint {resumed_from} "
                      f"(step {(survived.metadata or {}).get('step')})")
        job = _Worker(target, thread_id, bank, slow, log, resume=True)
        deadline = time.monotonic() + WORKER_TIMEOUT
        while job.drain(console, f"worker {job.proc.pid}") and time.monotonic() < deadline:
            time.sleep(0.02)
        if job.proc.wait(timeout=max(1.0, deadline - time.monotonic())) != 0:
            console.print(f"[red]the resumed worker failed (exit {job.proc.returncode})[/]\n"
                          f"{job.stderr_tail()}")
            return False

        console.rule("4 · the proof")
        return _prove(console, saver, ledger, thread_id, resumed_from, bank, target)
    finally:
        saver.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _prove(console: Console, saver: DurableSaver, ledger: Ledger, thread_id: str,
           resumed_from: str, bank: Path, target: Target) -> bool:
    with hot_view(saver.config) as view:
        rows = queries.history_rows(saver, view, thread_id, checkpoint_ns=None, limit=None)
    console.print(views.history_table(f"history of thread {thread_id!r}", rows,
                                      {resumed_from: "◀ resumed from"}, compact=True,
                                      width=console.width))
    records = [r for r in ledger.list(thread_id) if r.tool == "charge_card"]
    console.print(views.ledger_table("the tool ledger", ledger.list(thread_id)))
    charges = _statement(bank)
    console.print(_statement_table(charges))
    final = saver.get_tuple({"configurable": {"thread_id": thread_id}})
    messages = (final.checkpoint.get("channel_values", {}) if final else {}).get("messages", [])
    answer = str(messages[-1].content) if messages else ""
    children = [r for r in rows if r.checkpoint_id > resumed_from]
    times = {0: "never", 1: "once"}.get(len(charges), f"{len(charges)} times")
    verdicts = [
        (len(charges) == 1, f"the card was charged {times}, by the worker that was killed"),
        (len(records) == 1 and records[0].status == "succeeded" and records[0].attempts == 1,
         "the ledger holds one succeeded charge_card call, made in 1 attempt"),
        (bool(charges) and charges[0]["receipt"] in answer,
         "the final answer quotes the receipt of the killed worker's charge"),
        (bool(children), f"the resumed run continued from checkpoint {resumed_from} "
                         f"({len(children)} new checkpoints)"),
    ]
    console.print(views.note("final answer", answer or "(none)", style="green"))
    ok = all(v for v, _ in verdicts)
    flags = f"--schema {target.schema} --prefix {target.prefix}"
    console.print(views.note("verdict", Group(
        *(f"[{'green' if v else 'red'}]{'✔' if v else '✘'}[/] {text}" for v, text in verdicts),
        "",
        "The resumed run executed the tools step again: estimate_delivery ran a second time, "
        "charge_card was answered from the ledger. Without the ledger, the card would have "
        "been charged twice.",
    ), style="green" if ok else "red"))
    # Commands as plain lines, never wrapped or boxed, so that they can be copied; with
    # the demo's servers inline, so that a new shell (no LGD_* exported) reaches them
    program = this_program()
    urls = {"LGD_REDIS_URL": str(target.redis_url), "LGD_POSTGRES_URL": str(target.postgres_url)}
    secret = any(mask_url(url) != url for url in urls.values())  # never printed
    servers = "" if secret else "".join(f"{k}={shlex.quote(v)} " for k, v in urls.items())
    if str(target.redis_url).startswith("unix://"):
        console.print(f"Explore it (embedded servers: when they no longer run, `{program} "
                      "embedded up` in another shell starts them again):", markup=False)
    elif secret:
        console.print("Explore it (with LGD_REDIS_URL and LGD_POSTGRES_URL set as for this "
                      "run):")
    else:
        console.print("Explore it:")
    for command in ("history", "ledger"):
        console.print(Text(f"  {servers}{program} {command} {thread_id} {flags}"),
                      soft_wrap=True)
    return ok


def this_program() -> str:
    """This command line as the user can run it again from here: ``langgraph-durable`` when
    the PATH finds this very program, else its path (relative to the current folder when
    inside it; `make demo` runs it from the venv), or ``python -m langgraph_durable``."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "__main__.py" or argv0.suffix == ".py":
        return f"{shlex.quote(sys.executable)} -m langgraph_durable"
    found = shutil.which(argv0.name)
    if found and Path(found).resolve() == argv0.resolve():
        return argv0.name
    try:
        shown = argv0.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = argv0.resolve()
    return shlex.quote(str(shown))


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1:]))
