"""What a chaos run (`tests.support.chaos`) records and what it checks after each round.

`Run` is one thread: how its worker was to be killed, what it acknowledged (read from its
ack file by `Run.read_acks`), how it ended and how it resumed; `Tally` is the whole run,
printed as a table. `Checker` runs the checks of a round's threads once their workers
ended: every acknowledged checkpoint is in Postgres (write-behind's AOF ``everysec``
window counted apart), the thread resumes to its end and the resume is classified, no
order reached the provider twice (a fork included), no ship call is left unsettled, and
with `durable_model` the model answered no call the ledger recorded.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import redis

from langgraph_durable import DurableSaver
from langgraph_durable.errors import TierUnavailableError
from tests.support.chaos_worker import INPUTS, Options, build, finished, items
from tests.support.checkpoints import hot_keys_pattern
from tests.support.servers import POSTGRES_URL

T = TypeVar("T")

MODES = ("through", "behind")
AOF_WINDOW = 1.5  # seconds: appendfsync everysec's loss window, with a margin


def await_served(saver: DurableSaver, thread_id: str, timeout: float = 60.0) -> Any:
    """The head of ``thread_id`` once ``saver`` serves it (`retried`)."""
    return retried(lambda: saver.get_tuple({"configurable": {"thread_id": thread_id,
                                                             "checkpoint_ns": ""}}), timeout)


def retried(call: Callable[[], T], timeout: float = 60.0) -> T:
    """``call()``, tried again while the hot tier is refused. A write-behind saver refuses
    reads and drains (fail closed) while its breaker is open: after a Redis restart until
    a probe finds it back, and on a machine busy enough that a reply outlasts
    ``tier_timeout``, until the next probe. An application retries then, and so do the
    checks."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except TierUnavailableError as exc:
            if exc.tier != "hot" or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@dataclass
class Fork:
    """A fork the command line made of a running thread: its copied calls, by order."""

    thread_id: str
    checkpoint_id: str
    copied: dict[str, str] = field(default_factory=dict)  # order -> key the provider saw


@dataclass
class Run:
    """One thread: how its worker ended and how it resumed."""

    thread_id: str
    workload: str
    mode: str
    redis_kind: str
    ack_path: Path
    kill_at: int
    options: Options = field(default_factory=Options)
    kill_after: float | None = None  # seconds: durability "exit" acknowledges nothing before
    kill_at_request: int | None = None  # a supervisor killed mid-call: at its n-th request
    acks: list[tuple[str, str]] = field(default_factory=list)
    ack_read_at: dict[tuple[str, str], float] = field(default_factory=dict)
    redis_killed_at: float | None = None  # when the round's fault killed this run's Redis
    error: str = ""
    exit: str = ""
    resume: str = ""
    head_step: int | None = None
    faults: Counter[str] = field(default_factory=Counter)  # the worker's own (cancellations)
    warned_exit: bool = False
    fork: Fork | None = None

    @property
    def durability(self) -> str:
        return self.options.durability

    def line(self) -> str:
        """One log line: the thread, how its worker ended, where it resumed and why."""
        acked = sum(1 for ns, _ in self.acks if ns == "")
        o = self.options
        kill = (f"kill_at_request={self.kill_at_request}" if self.kill_at_request
                else f"kill_after={self.kill_after:.2f}s" if self.kill_after
                else f"kill_at={self.kill_at}")
        return (f"{self.thread_id} mode={self.mode} durability={self.durability} "
                f"driver={o.driver} tool={o.tool} handle_errors={o.handle_errors} "
                f"durable_model={o.durable_model} {_fmt(self.faults)} "
                f"fork={self.fork.thread_id if self.fork else '-'} "
                f"redis={self.redis_kind} {kill} acks={len(self.acks)} root_acks={acked} "
                f"resumed_at_step={self.head_step} | {self.resume}")

    def read_acks(self, offset: int) -> int:
        try:
            with self.ack_path.open("rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return offset
        end = data.rfind(b"\n") + 1
        for line in data[:end].decode().splitlines():
            word, _, rest = line.partition(" ")
            if word == "ack":
                ns, _, checkpoint_id = rest.rpartition(" ")
                self.acks.append((ns, checkpoint_id))
                self.ack_read_at.setdefault((ns, checkpoint_id), time.monotonic())
            elif word == "error":
                self.error = rest.split(" ", 1)[0]
            elif word == "fault":
                self.faults[{"cancel": "asyncio cancel (timeout)",
                             "cancel-mid-tool": "asyncio cancel mid-tool"}[rest]] += 1
            elif word == "warned":
                self.warned_exit = True
        return offset + end


@dataclass
class Tally:
    """What a chaos run did and found."""

    kills: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    threads: Counter[str] = field(default_factory=Counter)
    classes: Counter[str] = field(default_factory=Counter)
    draws: Counter[str] = field(default_factory=Counter)  # supervisor threads' options
    resolved: Counter[str] = field(default_factory=Counter)  # the operator's outcomes
    acknowledged: int = 0
    lost: int = 0
    lost_in_window: int = 0
    orders: int = 0  # orders shipped (a fork's own orders included)
    repeated: int = 0  # orders that reached the provider twice (or more)
    dropped: int = 0  # orders intended (asked for) that never reached the provider
    # orders that reached the provider again after a kill under durability "exit": the
    # workers' models were asked again and minted new tool-call ids, new calls (a plain
    # tool repeats them too; the ledger warns; `Checker._unrecorded`)
    repeated_unrecorded: int = 0
    # calls left "started" or "uncertain" by a run `Checker._unrecorded` covers that died
    # mid-call: its resume asked anew under new ids, so nothing settles them but the
    # operator (`langgraph-durable ledger resolve`), as docs/tool-ledger.md says
    cut_off_unrecorded: int = 0
    effects: int = 0  # requests the provider received
    resumed: int = 0
    completed: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def table(self) -> str:
        rows = [("kills (SIGKILL of an agent process)",
                 ", ".join(f"{m} {self.kills[m]}" for m in MODES)
                 + f" = {sum(self.kills.values())}"),
                ("worker exits", _fmt(self.exits)),
                ("faults", _fmt(self.faults)),
                ("threads", _fmt(self.threads)),
                ("acknowledged checkpoints", str(self.acknowledged)),
                ("acknowledged checkpoints lost", str(self.lost)),
                ("  ... in AOF everysec's last second (documented)", str(self.lost_in_window)),
                ("supervisor threads' draws", _fmt(self.draws)),
                ("cut-off calls the operator resolved", _fmt(self.resolved)),
                ("orders / provider requests / reached twice / never reached",
                 f"{self.orders} / {self.effects} / {self.repeated} / {self.dropped}"),
                ("  ... reached again after a kill under 'exit' (documented)",
                 str(self.repeated_unrecorded)),
                ("calls cut off under 'exit', left to the operator (documented)",
                 str(self.cut_off_unrecorded)),
                ("threads resumed / completed", f"{self.resumed} / {self.completed}"),
                ("violations", str(len(self.violations))),
                ("duration", f"{self.seconds:.0f} s")]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        lines.append("resume classes:")
        lines += [f"  {n:>4}  {c}" for c, n in sorted(self.classes.items(), key=lambda x: -x[1])]
        lines += [f"VIOLATION {v}" for v in self.violations]
        lines.append(self.summary())
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: kills, faults per kind, orders, and those that reached the provider
        twice or never."""
        return (f"summary: {sum(self.kills.values())} kills ({_fmt(self.kills)}), "
                f"{sum(self.faults.values())} faults ({_fmt(self.faults)}), "
                f"{self.orders} orders, {self.effects} provider requests, "
                f"{self.repeated} reached twice, {self.dropped} never reached, "
                f"{self.lost} acknowledged checkpoints lost, "
                f"{len(self.violations)} violations, {self.seconds:.0f} s")

    def violation(self, r: Run, what: str) -> None:
        """Record a violation found in ``r``'s thread (or by the faults injected on it)."""
        self.violations.append(f"{r.thread_id} ({r.mode}, redis {r.redis_kind}, "
                               f"{r.exit}): {what}")


def _fmt(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "-"


class Checker:
    """The checks of a round's threads, against the run's savers and schema."""

    def __init__(self, schema: str, savers: dict[tuple[str, str], DurableSaver],
                 tally: Tally) -> None:
        self.schema = schema
        self.savers = savers
        self.tally = tally

    def _stored(self, thread_id: str) -> set[tuple[str, str]]:
        with psycopg.connect(POSTGRES_URL) as conn:
            rows = conn.execute(f'SELECT checkpoint_ns, checkpoint_id FROM "{self.schema}".'
                                "lgd_checkpoints WHERE thread_id = %s", (thread_id,)).fetchall()
        return {(ns, cid) for ns, cid in rows}

    def check(self, r: Run) -> None:
        saver = self.savers[r.redis_kind, r.mode]
        self.tally.acknowledged += len(r.acks)
        lost = set(r.acks) - self._stored(r.thread_id)
        if r.mode == "behind" and r.redis_kind == "everysec" and r.redis_killed_at is not None:
            # README "Guarantees": Redis killed with appendfsync everysec loses about the
            # last second of writes acknowledged from it
            killed = r.redis_killed_at
            window = {a for a in lost if killed - AOF_WINDOW <= r.ack_read_at[a] <= killed}
            self.tally.lost_in_window += len(window)
            lost -= window
        if lost:
            self.tally.lost += len(lost)
            self.tally.violation(r, f"{len(lost)} acknowledged checkpoint(s) not in Postgres")
        graph = build(r.workload, saver, self.schema, POSTGRES_URL, r.thread_id, r.options)
        config: dict[str, Any] = {"configurable": {"thread_id": r.thread_id},
                                  "recursion_limit": 1000}
        r.resume = f"{r.exit.split(' (')[0]}{f' on {r.error}' if r.error else ''}, " \
            + self._classify(r, saver, graph, config)
        self.tally.classes[r.resume] += 1
        if r.durability == "exit" and not r.warned_exit and self._requests(r.thread_id):
            self.tally.violation(r, "a durable tool ran under durability 'exit' without the "
                                    "ledger's warning")
        if not self._run_to_end(r, graph, config):
            return
        if r.workload == "supervisor":
            self._check_effects(r, saver)

    def stuck(self, r: Run, seconds: float, stacks: str) -> None:
        """``r``'s worker was still running at the round's timeout: a hang (or a machine
        too slow for the timeout), with its threads' stacks to say which."""
        self.tally.violation(r, f"its worker was still running after {seconds:.0f} s; "
                                f"its threads:\n{stacks}")

    def _run_to_end(self, r: Run, graph: Any, config: Any) -> bool:
        """Resume ``config``'s thread to its end (as the operator would after a crash;
        again, from what is stored then, while a write-behind saver refuses Redis)."""
        def resume() -> None:
            state = graph.get_state(config)
            if not finished(r.workload, state.values):
                graph.invoke(None if state.created_at else INPUTS[r.workload], config,
                             durability=r.durability)

        if not finished(r.workload, retried(lambda: graph.get_state(config)).values):
            self.tally.resumed += 1
            try:
                retried(resume)
            except Exception as exc:  # every failure to resume is reported
                self.tally.violation(r, f"resume of {config['configurable']['thread_id']} raised "
                                        f"{type(exc).__name__}: {exc}")
                return False
        if finished(r.workload, graph.get_state(config).values):
            self.tally.completed += 1
            return True
        self.tally.violation(r, f"{config['configurable']['thread_id']} did not reach its end")
        return False

    def _classify(self, r: Run, saver: DurableSaver, graph: Any, config: Any) -> str:
        """Where the thread resumes from, and why."""
        head = await_served(saver, r.thread_id)
        acked = [cid for ns, cid in r.acks if ns == ""]
        if head is None:
            if acked:
                self.tally.violation(r, "no checkpoint, though some were acknowledged")
                return "LOST: no checkpoint"
            return "from its input: it stored no checkpoint before it ended"
        head_id = head.checkpoint["id"]
        if acked and head_id < acked[-1]:
            self.tally.violation(r, f"resumes from {head_id}, older than acknowledged "
                                    f"{acked[-1]}; " + hot_state(saver, r.thread_id))
            return "LOST: behind its last acknowledged checkpoint"
        if acked and head_id == acked[-1]:
            where = "at its last acknowledged checkpoint"
        else:
            line = _line(saver, r.thread_id, head_id)
            if acked and acked[-1] not in line:
                self.tally.violation(r, f"head {head_id} does not descend from {acked[-1]}; "
                                        + hot_state(saver, r.thread_id))
                return "FORK: head not on the acknowledged line"
            past = line.index(acked[-1]) if acked else len(line)
            where = (f"{past} checkpoint(s) past its last ack (stored, the process died "
                     "before it acknowledged them)")
        state = graph.get_state(config)
        finished_tasks = {tid for tid, _, _ in head.pending_writes or []}
        if finished(r.workload, state.values):
            step = "complete"
        elif not state.next:
            step = "its step done, next checkpoint not written: invoke(None) applies it"
        elif finished_tasks & {t.id for t in state.tasks}:
            step = "mid-step: finished tasks' writes kept, the rest re-run"
        else:
            step = "at a step boundary"
        inside = sum(1 for t in state.tasks if t.state is not None and t.name == "worker")
        nested = f", {inside} worker agent(s) resume in their subgraph" if inside else ""
        r.head_step = head.metadata.get("step", -1)
        return f"{where}; {step}{nested}"

    def requests_by_thread(self) -> dict[str, int]:
        """How many requests the provider received from each thread so far."""
        with psycopg.connect(POSTGRES_URL) as conn:
            rows = conn.execute(f'SELECT thread_id, count(*) FROM "{self.schema}".chaos_effects '
                                "GROUP BY thread_id").fetchall()
        return {thread: int(n) for thread, n in rows}

    def _requests(self, thread_id: str) -> dict[str, list[str]]:
        """The requests the provider received from ``thread_id``: the keys, by order."""
        with psycopg.connect(POSTGRES_URL) as conn:
            rows = conn.execute(f'SELECT item, idem_key FROM "{self.schema}".chaos_effects '
                                "WHERE thread_id = %s ORDER BY id", (thread_id,)).fetchall()
        requests: dict[str, list[str]] = {}
        for item, key in rows:
            requests.setdefault(item, []).append(key)
        return requests

    def _check_effects(self, r: Run, saver: DurableSaver) -> None:
        """No order reached the provider twice: a ``verify=`` tool's provider applies each
        request, so one request per order; an idempotent tool's provider dedupes by key, so
        one key per order. A fork shares with its source the orders whose calls it copied
        (it must present the key the provider saw); the others are its own. Every ship call
        is settled; with `durable_model`, the model answered no call the ledger recorded."""
        source = self._requests(r.thread_id)
        fork: dict[str, list[str]] = {}
        if r.fork is not None:
            graph = build(r.workload, saver, self.schema, POSTGRES_URL, r.fork.thread_id,
                          r.options)
            config = {"configurable": {"thread_id": r.fork.thread_id}, "recursion_limit": 1000}
            if self._run_to_end(r, graph, config):
                fork = self._requests(r.fork.thread_id)
                self._check_ledger(r, saver, r.fork.thread_id, strict=False)
        for item in items():
            orders = [(r.thread_id, source.get(item, []))]
            if r.fork is not None and item in r.fork.copied:
                orders = [(f"{r.thread_id} and its fork", source.get(item, [])
                           + fork.get(item, []))]
            elif r.fork is not None:
                orders.append((r.fork.thread_id, fork.get(item, [])))
            for who, keys in orders:
                n = len(keys) if r.options.tool == "verify" else len(set(keys))
                self.tally.effects += len(keys)
                self.tally.orders += 1
                if n == 0 and not (who == r.fork.thread_id if r.fork else False):
                    self.tally.dropped += 1
                    self.tally.violation(r, f"order {item} never reached the provider ({who})")
                elif n > 1 and self._unrecorded(r):
                    self.tally.repeated_unrecorded += 1
                elif n > 1:
                    self.tally.repeated += 1
                    self.tally.violation(r, f"order {item} reached the provider {n} times ({who}, "
                                            f"{r.options.tool} tool, keys {keys}); ledger: "
                                            + self._rows(r, item))
        self._check_ledger(r, saver, r.thread_id)
        if r.options.durable_model:
            with psycopg.connect(POSTGRES_URL) as conn:
                answered = conn.execute(
                    f'SELECT count(*) FROM "{self.schema}".chaos_model_calls '
                    "WHERE thread_id = %s", (r.thread_id,)).fetchone()[0]  # type: ignore[index]
            attempts = sum(rec.attempts for rec in saver.ledger.list(r.thread_id)
                           if rec.tool.startswith("model:"))
            if answered > attempts:
                self.tally.violation(r, f"the model answered {answered} times, the ledger recorded "
                                        f"{attempts} attempts: a recorded answer was asked again")

    @staticmethod
    def _unrecorded(r: Run) -> bool:
        """Whether ``r`` ran where no decision is durable before a call: durability "exit",
        and killed or failed (a Postgres cut, Redis refusing), so the invocation's closing
        checkpoint was never stored and the resume, from its input or from an earlier
        invocation's end, ran that invocation's workers again from the start. Their
        calls are in worker subgraphs, whose namespaces come from the supervisor's task
        ids, which come from checkpoints never stored: with or without recorded model
        calls, the workers' models are asked again and mint new tool-call ids, new calls,
        as with a plain tool (docs/tool-ledger.md, "One call, one key")."""
        return r.durability == "exit" and (
            r.exit.startswith(("killed", "failed")) or r.head_step is None)

    def _rows(self, r: Run, item: str) -> str:
        """The ship calls of ``item`` in ``r``'s thread and its fork, for a violation."""
        threads = [r.thread_id] + ([r.fork.thread_id] if r.fork else [])
        with psycopg.connect(POSTGRES_URL) as conn:
            rows = conn.execute(
                "SELECT thread_id, key, COALESCE(idempotency_key, key), checkpoint_ns, step, "
                "status, attempts, duplicate_of, lease_owner, started_at, finished_at "
                f'FROM "{self.schema}".lgd_tool_calls WHERE thread_id = ANY(%s) '
                "AND tool_call_id LIKE %s ORDER BY started_at",
                (threads, f"ship-{item}-%")).fetchall()
        return "; ".join(" ".join(str(v) for v in row) for row in rows)

    def _check_ledger(self, r: Run, saver: DurableSaver, thread_id: str, *,
                      strict: bool = True) -> None:
        """Every ship call of the thread settled (none left started or uncertain: its policy
        or the operator applied), one succeeded per order; ``strict`` and without errors
        shown to the model and outside `_unrecorded` runs, one row per order (a fork
        re-running a step in a new namespace may replay the copy under a new row)."""
        records: dict[str, list[str]] = {}
        for record in saver.ledger.list(thread_id):
            if record.tool == "ship":
                records.setdefault(order_of(record.tool_call_id), []).append(record.status)
        for item in items():
            statuses = records.get(item, [])
            unsettled = [s for s in statuses if s in ("started", "uncertain")]
            if unsettled and "succeeded" in statuses and self._unrecorded(r):
                self.tally.cut_off_unrecorded += len(unsettled)
                unsettled = []
            if unsettled or "succeeded" not in statuses or (
                    strict and not r.options.handle_errors and not self._unrecorded(r)
                    and statuses != ["succeeded"]):
                self.tally.violation(r, f"{thread_id}: order {item} has ledger rows "
                                        f"{statuses or 'none'}: " + self._rows(r, item))


def hot_state(saver: DurableSaver, thread_id: str) -> str:
    """What Redis holds of ``thread_id`` now, for a violation about its head: the Redis
    process and the run id its prefix records as checked, then each of the thread's keys
    with its type and TTL, and what names a copy's state (a registry's keys, an index's
    ids, a versions hash or a checkpoint hash's fields other than the frames)."""
    layout = saver.engine.context.layout
    keys = layout.thread(thread_id)
    client = redis.Redis.from_url(saver.config.redis_url)
    try:
        said = [f"redis run id {client.info('server')['run_id']}, checked "
                f"{client.get(layout.incarnation())!r}"]
        for key in sorted(client.scan_iter(match=hot_keys_pattern(saver.config.key_prefix,
                                                                  thread_id), count=1000)):
            kind, ttl = client.type(key).decode(), client.pttl(key)
            if kind == "set":
                held: Any = sorted(k.decode()[len(keys.base):] for k in client.smembers(key))
            elif kind == "zset":
                held = [m.decode() for m in client.zrange(key, 0, -1)]
            elif kind == "hash":
                held = {f.decode(): v[:40] for f, v in client.hgetall(key).items()
                        if f not in (b"c", b"m", b"bk")}
            else:
                held = kind
            said.append(f"{key.decode()[len(keys.base):]} {kind} ttl={ttl} {held}")
        return "hot state: " + "; ".join(said)
    except redis.RedisError as exc:
        return f"hot state: Redis did not answer ({exc})"
    finally:
        client.close()


def order_of(tool_call_id: str | None) -> str:
    """The order a ship call acts on, from its tool-call id (``ship-<order>-<random>``)."""
    return (tool_call_id or "").removeprefix("ship-").rsplit("-", 1)[0]


def _line(saver: DurableSaver, thread_id: str, head_id: str) -> list[str]:
    """The root namespace's checkpoint ids from ``head_id`` back to the first, by parent."""
    parents = {t.checkpoint["id"]: (t.parent_config or {}).get("configurable", {})
               .get("checkpoint_id") for t in saver.list(
                   {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})}
    line: list[str] = []
    at: str | None = head_id
    while at is not None and at not in line:
        line.append(at)
        at = parents.get(at)
    return line
