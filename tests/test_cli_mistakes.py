"""A newcomer's mistakes, said and never acted on (issue 34, the third hour).

An empty message is refused at every entrance (the ``turns`` command, ``TurnsClient``, the
conversation's updates) instead of running a turn on nothing; a command about a conversation
that does not exist says so and creates nothing; ``turns state`` with no worker says that no
worker polls, at once; an unknown flag gets the usage of the command it follows.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from temporalio.client import WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from durable_turns.contract import (
    CONVERSATION_WORKFLOW,
    EMPTY_MESSAGE,
    UPDATE_SEND,
    UPDATE_START,
    EmptyMessage,
    TurnResult,
    empty_message_problem,
)
from durable_turns.messages import FilePart, Message, TextPart, user_message
from tests.support.harness import ROOT, Harness
from tests.test_newcomer import turns as turns_from


def turns(harness: Harness, cwd: Path, *args: str, timeout: float = 60, **env: str):
    """``turns ARGS`` from ``cwd``, this checkout's code (wherever the package is installed)."""
    return turns_from(harness, cwd, *args, timeout=timeout, PYTHONPATH=str(ROOT), **env)


def test_what_counts_as_an_empty_message() -> None:
    for text in ("", " ", "\n\t  \u3000"):
        assert empty_message_problem([user_message(text)]) == (
            "message 0 (user) has only empty text: a turn needs something to answer"
        )
    assert empty_message_problem([Message(role="user")]) == (
        "message 0 (user) has no content: a turn needs something to answer"
    )
    blank_second = [user_message("hi"), user_message("  ")]
    assert empty_message_problem(blank_second) == (
        "message 1 (user) has only empty text: a turn needs something to answer"
    )
    picture = FilePart(media_type="image/png", url="https://example.com/a.png")
    assert empty_message_problem([Message(role="user", parts=[TextPart(text=""), picture])]) is None
    assert empty_message_problem([user_message(" x ")]) is None


async def test_an_empty_message_runs_no_turn_from_any_entrance(
    harness: Harness, tmp_path: Path
) -> None:
    harness.start_worker()
    conversation = harness.conv("empty")

    # the turns command: one line, exit status 2, nothing sent
    for message, said in (("", "empty"), ("   ", "only whitespace")):
        out = await asyncio.to_thread(turns, harness, tmp_path, "chat", conversation, message)
        assert out.returncode == 2, out
        assert out.stderr.strip().splitlines() == [
            f"turns chat: the message is {said}: a turn needs something to answer"
            f" (e.g. turns chat {conversation} 'Weather in Paris?')"
        ]

    # TurnsClient: raised before anything is sent
    blank = Message(role="user", parts=[TextPart(text=" \n")])
    for call in (
        harness.turns.send(conversation, ""),
        harness.turns.start(conversation, [blank]),
        harness.turns.submit(conversation, "  "),
    ):
        with pytest.raises(EmptyMessage, match="message 0 \\(user\\) has only empty text"):
            await call
    assert not await harness.turns.exists(conversation)  # nothing was ever started

    # the wire: a sendMessage/startTurn from any Temporal client is rejected, typed
    for update in (UPDATE_SEND, UPDATE_START):
        op: WithStartWorkflowOperation = WithStartWorkflowOperation(
            CONVERSATION_WORKFLOW,
            id=conversation,
            task_queue=harness.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await harness.client.execute_update_with_start_workflow(
                update,
                {"messages": [{"role": "user", "content": "   "}]},
                start_workflow_operation=op,
            )
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == EMPTY_MESSAGE
        assert cause.message == (
            "message 0 (user) has only empty text: a turn needs something to answer"
        )
    state = await harness.turns.state(conversation)
    assert state.turn_count == 0 and state.running is None and not state.queue

    # and a message with something in it still runs
    result: TurnResult = await harness.send(conversation, "Weather in Oslo?")
    assert result.status == "completed" and result.turn_number == 1


async def test_a_command_about_a_missing_conversation_creates_nothing(
    harness: Harness, tmp_path: Path
) -> None:
    """Old code: `turns continue <typo>` created a conversation with a skipped turn,
    `turns regenerate <typo>` one with a failed turn."""
    harness.start_worker()
    real = harness.conv("real")
    assert (await harness.send(real, "Weather in Rome?")).status == "completed"
    typo = harness.conv("reall")
    for command in ("continue", "regenerate"):
        out = await asyncio.to_thread(turns, harness, tmp_path, command, typo)
        assert out.returncode == 1, out
        assert out.stderr.strip().splitlines() == [
            f"turns: no conversation {typo!r} on {harness.address} (task queue"
            f" {harness.task_queue!r}): `turns chat {typo} MESSAGE` starts one"
        ]
        assert out.stdout == ""
    assert not await harness.turns.exists(typo)

    # the same commands on the conversation that exists still run
    again = await asyncio.to_thread(
        turns, harness, tmp_path, "regenerate", real, TURNS_DATA_DIR=str(harness.tmp / "data")
    )
    assert again.returncode == 0, again.stderr
    assert "[turn 2 · completed" in again.stdout


async def test_state_without_a_worker_says_so_at_once(harness: Harness, tmp_path: Path) -> None:
    """Old code: the query waited for a worker, then said "Timeout expired"."""
    conversation = harness.conv("unserved")
    await harness.client.start_workflow(
        CONVERSATION_WORKFLOW, id=conversation, task_queue=harness.task_queue
    )
    began = time.monotonic()
    out = await asyncio.to_thread(turns, harness, tmp_path, "state", conversation, timeout=30)
    took = time.monotonic() - began
    assert out.returncode == 1, out
    assert out.stderr.strip().splitlines() == [
        f"turns: waiting for a worker: no worker polls task queue {harness.task_queue!r} on"
        f" {harness.address}, and a conversation's state is answered by its worker: start one"
        f" with `turns worker` (conversation {conversation!r} is running)"
    ]
    assert "Timeout expired" not in out.stderr and took < 15, took


def test_an_unknown_flag_gets_the_usage_of_the_command_it_follows(tmp_path: Path) -> None:
    """Old code: an unknown flag after a subcommand printed the top level's usage."""
    harness = type("NoServer", (), {"address": "127.0.0.1:1", "task_queue": "none"})()
    for args, usage, error in (
        (("chat", "c", "hi", "--bogus"), "usage: turns chat ", "turns chat: error:"),
        (("state", "c", "--json"), "usage: turns state ", "turns state: error:"),
        (("worker", "--nope"), "usage: turns worker ", "turns worker: error:"),
        (("--bogus", "chat", "c", "hi"), "usage: turns [-h]", "turns: error:"),
    ):
        out = turns(harness, tmp_path, *args)  # type: ignore[arg-type]
        assert out.returncode == 2, out
        assert out.stderr.startswith(usage), out.stderr
        assert (
            f"{error} unrecognized arguments: {args[-1] if args[0] != '--bogus' else '--bogus'}"
            in (out.stderr)
        )


@pytest.mark.parametrize(
    "command",
    [["worker.py"], ["-m", "durable_turns.runtime"], ["-m", "durable_turns.cli", "worker"]],
    ids=["worker.py", "runtime", "turns worker"],
)
def test_a_worker_with_a_bad_setting_says_so_from_every_entrance(
    command: list[str], tmp_path: Path
) -> None:
    """Every way to start a worker ends through ``durable_turns.entry`` (no interpreter
    teardown for temporalio to abort): "worker: …" in one line, exit status 1, atexit run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))}
    env.update(TURNS_LOOP_COALESCE_MS="99", PYTHONPATH=str(ROOT))
    script = [str(ROOT / command[0]), *command[1:]] if command[0].endswith(".py") else command
    out = subprocess.run(
        [sys.executable, *script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out
    assert out.stderr.strip().splitlines()[-1] == (
        "worker: TURNS_LOOP_COALESCE_MS must be 0 (off) to 50"
    )
