"""The differential agent-pattern suite: a durable tool runs exactly the calls a plain tool
would, never fewer, never more.

Each ordinary agent shape (`tests/support/agent_patterns.py`) runs twice: with plain tools
(and a plain model) on LangGraph's ``InMemorySaver``, the reference, and with durable tools
(`durable_tool`, `DurableMiddleware`, `durable_model`) on a `DurableSaver`, in both write
modes. Effects are counted outside the saver, with the idempotency key each durable effect
ran under; the fake model mints a new random tool-call id on every answer, as real models
do. Without faults, the durable count equals the reference's exactly, on every run, and no
key is used for two effects: a durable tool drops no effect the user asked for (a second
apple, a second order line, a next turn, a new conversation on a reused thread id), repeats
none, and never sends two requests under one key (which a provider deduping by key would
absorb). Shapes whose outcome depends on a race (parallel tasks, parallel tool calls) run
`RACY_RUNS` times each.
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable import DurableSaver
from tests.support import agent_patterns as ap

RACY_RUNS = 20
"""Runs of each shape whose outcome could depend on which of two concurrent calls wins."""


def differential(pattern: ap.Pattern, saver: DurableSaver, *, expected: int, runs: int = 1,
                 effect: str = ap.APPLE) -> None:
    """Run ``pattern`` with plain tools on ``InMemorySaver`` (which must count ``expected``
    ``effect`` per run: the pattern is what it claims) and with durable ones on ``saver``:
    every durable run counts what the reference run counted."""
    reference = ap.counts(pattern, InMemorySaver(), False, runs=runs, effect=effect)
    assert reference == [expected] * runs, f"the reference itself: {reference}"
    durable = ap.counts(pattern, saver, True, runs=runs, effect=effect)
    assert durable == reference, (
        f"{pattern.__name__}: durable {durable} != reference {reference} ({effect})")


async def adifferential(pattern: ap.APattern, saver: DurableSaver, *, expected: int,
                        runs: int = 1, effect: str = ap.APPLE) -> None:
    """Async twin of `differential` (``ainvoke``)."""
    reference = await ap.acounts(pattern, InMemorySaver(), False, runs=runs, effect=effect)
    assert reference == [expected] * runs, f"the reference itself: {reference}"
    durable = await ap.acounts(pattern, saver, True, runs=runs, effect=effect)
    assert durable == reference, (
        f"{pattern.__name__}: durable {durable} != reference {reference} ({effect})")


# ------------------------------------------------------------------- turns and threads


def test_a_sub_agent_asked_again_in_a_new_turn_runs_again(saver: DurableSaver) -> None:
    """A ``create_agent`` agent used as the node of a parent graph, asked in turn 1 and again
    in turn 2 to add an apple, adds two apples: a subgraph's steps start afresh every
    turn, yet turn 2's call is a new call, not a replay of turn 1's."""
    differential(ap.sub_agent_two_turns, saver, expected=2)


def test_the_same_request_in_two_turns_at_the_root_runs_twice(saver: DurableSaver) -> None:
    """A root ``create_agent`` agent asked in two turns to add an apple adds two apples."""
    differential(ap.root_agent_two_turns, saver, expected=2)


@pytest.mark.parametrize("keep_ledger", [False, True])
def test_a_reused_thread_id_after_a_delete_runs_the_new_conversation(
        saver: DurableSaver, keep_ledger: bool) -> None:
    """A thread deleted (``keep_ledger`` or not) and its id used again for a new conversation
    (thread id = user id is common): the new conversation's calls run, and none is answered
    from the deleted conversation's kept rows, which are an audit trail only."""
    differential(ap.reused_thread(keep_ledger), saver, expected=2)


# -------------------------------------------------------------- equal calls in one step


def test_a_node_calling_the_tool_per_order_line_runs_every_line(saver: DurableSaver) -> None:
    """A node that calls a durable tool once per order line (``tool.invoke`` in the node,
    no tool-call id) with two equal lines adds two apples: the second line is a call of
    its own, not a replay of the first."""
    differential(ap.order_lines_loop, saver, expected=2)


def test_a_send_fan_out_with_equal_arguments_runs_every_task(saver: DurableSaver) -> None:
    """Two parallel ``Send`` tasks of one step, each adding an apple, add two apples on
    every run, whichever claims its call first; neither fails."""
    differential(ap.send_fan_out, saver, expected=2, runs=RACY_RUNS)


async def test_an_async_send_fan_out_with_equal_arguments_runs_every_task(
        saver: DurableSaver) -> None:
    """`test_a_send_fan_out_with_equal_arguments_runs_every_task` with async nodes and tool,
    under ``ainvoke``: two apples on every run."""
    await adifferential(ap.asend_fan_out, saver, expected=2, runs=RACY_RUNS)


@pytest.mark.parametrize("shape", [ap.two_calls_agent, ap.two_calls_idempotent,
                                   ap.two_calls_verified, ap.two_calls_middleware,
                                   ap.two_calls_tool_node],
                         ids=["create_agent", "idempotent", "verify", "middleware", "tool_node"])
def test_identical_tool_calls_in_one_message_each_run(saver: DurableSaver,
                                                      shape: ap.Pattern) -> None:
    """A model asking for two apples as two tool calls with equal arguments (and two random
    ids) in one ``AIMessage`` gets two apples on every run, each under a key of its own:
    through ``create_agent`` with durable tools (default, ``idempotent=True`` and
    ``verify=`` policies), with `DurableMiddleware` over plain tools, and through a
    ``ToolNode``. Neither call takes the other, still running, for a crashed one: no false
    `ToolOutcomeUncertainError`, no second request under one key."""
    differential(shape, saver, expected=2, runs=RACY_RUNS)


async def test_identical_async_tool_calls_in_one_message_each_run(saver: DurableSaver) -> None:
    """Two equal tool calls in one message, async tools in ``create_agent`` under
    ``ainvoke``: two apples on every run."""
    await adifferential(ap.atwo_calls_agent, saver, expected=2, runs=RACY_RUNS)


def test_a_durable_model_asked_twice_with_the_same_input_is_called_twice(
        saver: DurableSaver) -> None:
    """A node that samples its `durable_model` twice with the same input (two drafts, a
    self-consistency vote) calls the model twice, as with the plain model, and gets two
    answers, not the first one twice."""
    differential(ap.model_sampled_twice, saver, expected=2, effect=ap.MODEL)


# ------------------------------------------------------------ forks and human approval


@pytest.mark.parametrize("at", ["model", "tools"])
def test_a_time_travel_fork_runs_its_steps_again(saver: DurableSaver, at: str) -> None:
    """Replaying a thread from an earlier checkpoint (``invoke(None, config)`` with its
    ``checkpoint_id``) forks it, and LangGraph runs the steps after that checkpoint again:
    from before the model (the model asks again) or before the tools (the recorded call
    runs again), the fork adds its apple, as with a plain tool."""
    differential(ap.time_travel_fork(at), saver, expected=2)


@pytest.mark.parametrize(("at", "effect", "expected"),
                         [("model", ap.APPLE, 2), ("tools", "cart:pear", 1)])
def test_an_update_state_fork_runs_its_steps(saver: DurableSaver, at: str, effect: str,
                                             expected: int) -> None:
    """Editing an earlier checkpoint with ``update_state`` and running the fork runs its
    steps: the request asked again adds a second apple; the tool call edited to a pear,
    keeping its id (as a human edits a call), adds the pear."""
    differential(ap.update_state_fork(at), saver, expected=expected, effect=effect)


def test_interrupt_before_the_tool_and_resume_runs_each_approved_call_once(
        saver: DurableSaver) -> None:
    """A human approves each tool call (``interrupt()`` in a node before the ``ToolNode``,
    resumed with ``Command(resume="yes")``) over two turns: each approved call runs
    once, two apples in all."""
    differential(ap.interrupt_and_resume, saver, expected=2)
