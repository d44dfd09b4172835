"""Issue 33's oracle with faults: agent patterns killed with SIGKILL, then resumed.

Each pattern runs once as the reference (plain tools on LangGraph's ``InMemorySaver``, no
faults) for its count of effects. Then, with durable tools on a `DurableSaver` (both write
modes; ``durability="async"``, the default, and ``"sync"``), one real process per kill point
plays the pattern and SIGKILLs itself there, and a fresh process resumes the thread with
``invoke(None)`` and plays the turns after the killed one
(`tests/support/killed_patterns_worker.py`). Effects are counted outside the saver, in a
provider's table, with the idempotency key each ran under. Whatever the kill point:

- never more effects than the reference; exactly as many with ``verify=`` (it asks the
  provider's table) and, counted by distinct key as a provider deduping by key holds them,
  with ``idempotent=True``;
- with the default policy, a step-boundary kill loses no call and repeats none (a tool's
  outcome is recorded before its task's writes), and a kill inside the tool leaves the
  call ``uncertain``: the resume raises `ToolOutcomeUncertainError`; once an operator
  settles it (``saver.ledger.resolve``: ``"succeeded"`` where the provider's table shows
  the effect, ``"retry"`` where not), the resume finishes with the reference's count.

Kill points, per pattern (`KILLS`; a step counts in the root graph or, for the sub-agent,
in its subgraph, as `KillPoint` does: after that step's checkpoint was stored, before or
after the writes of its first finished task; later checkpoints are held back):

- ``two_calls_agent`` (``create_agent``; one model message with two equal tool calls):
  before the model step's writes (the model is asked again, new ids, new calls), before
  and after the tool step's writes (the other tool task may be mid-call: its call is then
  uncertain too), and mid-tool.
- ``order_lines_loop`` (a node calling the tool per line, two equal lines): after the
  input step's writes, before the node's writes (the node runs again from the same
  checkpoint: both lines replayed), and mid-tool (the first line).
- ``send_fan_out`` (two ``Send`` tasks adding an apple each): after the writes that
  carry the ``Send`` packets, before the tasks' writes, and mid-tool.
- ``sub_agent_two_turns`` (``create_agent`` as a node, asked in two turns): in turn 1,
  before the parent's writes of the finished sub-agent (the parent's step runs again from
  the same checkpoint, and finds the sub-agent's own checkpoints) and mid-tool (then turn
  2 runs after the resume); in turn 2, before the sub-agent's model step's and tool
  step's writes.

Mid-tool kills run with each policy (default, ``idempotent=True``, ``verify=``); step
boundaries with the default policy, the strictest. The cases of one pattern, write mode
and durability run in parallel processes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest

from langgraph_durable import DurableSaver
from tests.support import forked
from tests.support import killed_patterns_worker as worker
from tests.support.killed_patterns_worker import UNCERTAIN, Case, Effects, Run
from tests.support.servers import POSTGRES_URL, REDIS_URL

MID_TOOL = [Case("mid-tool", policy) for policy in worker.POLICIES]
KILLS: dict[str, list[Case]] = {
    "two_calls_agent": [Case("root", step=0), Case("root", step=1),
                        Case("root", step=1, when="after"), *MID_TOOL],
    "order_lines_loop": [Case("root", step=-1, when="after"), Case("root", step=0),
                         *MID_TOOL],
    "send_fan_out": [Case("root", step=-1, when="after"), Case("root", step=0), *MID_TOOL],
    "sub_agent_two_turns": [Case("root", step=0), Case("subgraph", turn=1, step=0),
                            Case("subgraph", turn=1, step=1),
                            *MID_TOOL],
}
PARALLEL = {"two_calls_agent", "send_fan_out"}
"""Patterns whose tool calls run at once: a kill at the tool step's writes may find the
other call mid-way (uncertain)."""
RESUMES = 3
"""Resumes per case at most (each after settling the calls the previous one found
uncertain)."""
JOIN = 120


@dataclass
class Trial:
    """One case on its own thread: what its resumes met."""

    case: Case
    run: Run
    exits: list[int | None] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)  # "succeeded"/"retry" per uncertain call

    @property
    def done(self) -> bool:
        return bool(self.exits) and self.exits[-1] == 0


@pytest.fixture(scope="module")
def effects(namespace: tuple[str, str]) -> Effects:
    """The provider's table of effects (and the saver's tables) in this module's schema."""
    schema, prefix = namespace
    with DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix) as saver:
        saver.setup()
    table = Effects(schema)
    table.setup()
    return table


def _play(namespace: tuple[str, str], trials: list[Trial]) -> None:
    """Kill every trial's first process at its point, then resume them all, settling the
    uncertain calls by the provider's table between resumes."""
    schema, prefix = namespace
    procs = [forked.start(worker.kill, schema, prefix, t.run, t.case) for t in trials]
    for trial, proc in zip(trials, procs, strict=True):
        proc.join(timeout=JOIN)
        assert proc.exitcode == -9, f"{trial.case}: did not die at its point ({proc.exitcode})"
    for _ in range(RESUMES):
        pending = [t for t in trials if not t.done and (not t.exits or t.exits[-1] == UNCERTAIN)]
        if not pending:
            return
        procs = [forked.start(worker.resume, schema, prefix, t.run, t.case) for t in pending]
        for trial, proc in zip(pending, procs, strict=True):
            proc.join(timeout=JOIN)
            trial.exits.append(proc.exitcode)
        _settle(namespace, [t for t in pending if t.exits[-1] == UNCERTAIN])


def _settle(namespace: tuple[str, str], trials: list[Trial]) -> None:
    """Resolve each uncertain call as an operator who asked the provider would."""
    if not trials:
        return
    schema, prefix = namespace
    table = Effects(schema)
    with DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix) as saver:
        for trial in trials:
            for row in saver.ledger.list(trial.run.thread_id):
                if row.status == "uncertain":
                    outcome = "succeeded" if table.happened(row.idempotency_key) else "retry"
                    saver.ledger.resolve(row.key, outcome)
                    trial.settled.append(outcome)


def _judge(trial: Trial, expected: int, effects: Effects) -> list[str]:
    """What is wrong with ``trial``'s outcome (nothing: an empty list)."""
    case, wrong = trial.case, []
    raw, keys = effects.count(trial.run.thread_id)
    if not trial.done:
        wrong.append(f"the resumes did not finish: exit codes {trial.exits}")
    if case.policy == "idempotent":
        if keys != expected:
            wrong.append(f"{keys} distinct keys ({raw} effects), reference {expected}")
    elif (raw, keys) != (expected, expected):
        wrong.append(f"{raw} effects under {keys} keys, reference {expected}")
    raised = UNCERTAIN in trial.exits
    if case.policy != "default" and raised:
        wrong.append("ToolOutcomeUncertainError despite a policy that settles the call")
    if case.policy == "default" and case.where == "mid-tool" and (
            not raised or "succeeded" not in trial.settled):
        wrong.append(f"the call killed mid-tool was not uncertain (settled: {trial.settled})")
    if case.where != "mid-tool" and trial.run.pattern not in PARALLEL and raised:
        wrong.append("a step-boundary kill left a call uncertain")
    return [f"{case}: {w}" for w in wrong]


@pytest.mark.parametrize("durability", ["async", "sync"])
@pytest.mark.parametrize("write_mode", ["through", "behind"])
@pytest.mark.parametrize("pattern", list(KILLS))
def test_a_killed_and_resumed_pattern_never_exceeds_the_reference(
        namespace: tuple[str, str], effects: Effects, pattern: str, write_mode: str,
        durability: str) -> None:
    """Killed at each of the pattern's kill points (`KILLS`) and resumed in a new process,
    a pattern with durable tools ends with the reference's effects: none repeated, none
    dropped (by distinct key for an idempotent tool); a default-policy call killed mid-tool
    is ``uncertain`` and the resume raises until it is settled by hand."""
    expected = worker.reference(pattern)
    assert expected == 2, f"the reference itself: {expected}"
    trials = [Trial(case, Run(f"{pattern}-{uuid.uuid4().hex[:12]}", pattern, write_mode,
                              durability)) for case in KILLS[pattern]]
    _play(namespace, trials)
    wrong = [w for trial in trials for w in _judge(trial, expected, effects)]
    assert not wrong, "\n".join(wrong)
