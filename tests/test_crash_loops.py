"""Crash loops are bounded, at the default budgets: a worker's death and a provider's failure
are counted apart (``TURNS_CRASH_RETRIES``, 5 worker deaths, and ``TURNS_MODEL_RETRIES``, 2
more tries of a failing model step), with real worker processes that die by SIGKILL and a
supervisor that starts a new one each time, as a deployment's would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from temporalio.service import RPCError, RPCStatusCode

from durable_turns.client import task_being_retried
from durable_turns.config import MAX_CRASH_RETRIES, Settings
from durable_turns.contract import MODEL_STEP, TOOL_CALL, WORKER_CRASH_LOOP
from durable_turns.streams import RECOVERING, TURN_FINISH
from durable_turns.workflows.options import CHAT_RESPONSE_CRASH_RETRIES
from tests.support.harness import Harness, WorkerProcess
from tests.support.history import activity_attempts
from tests.support.probes import chunk_backend, wait_until

CRASH_RETRIES = Settings().crash_retries
MODEL_TRIES = Settings().model_retries + 1
TOOLS = "tests.support.tools,tests.support.crash_tools"


def test_the_crash_budget_is_a_bounded_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().crash_retries == 5
    monkeypatch.setenv("TURNS_CRASH_RETRIES", "0")
    assert Settings.from_env().crash_retries == 0  # no run again after a death
    for bad in (-1, MAX_CRASH_RETRIES + 1):
        with pytest.raises(ValueError, match="TURNS_CRASH_RETRIES must be between 0 and 50"):
            Settings(crash_retries=bad)


@contextlib.asynccontextmanager
async def supervised(harness: Harness, **env: str) -> AsyncIterator[list[WorkerProcess]]:
    """One worker at a time, started again whenever it dies; yields the workers started."""
    started = [harness.start_worker(**env)]

    async def watch() -> None:
        while True:
            if started[-1].proc.poll() is not None:
                started.append(await asyncio.to_thread(harness.start_worker, **env))
            await asyncio.sleep(0.1)

    task = asyncio.create_task(watch())
    try:
        yield started
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_tool_that_kills_its_worker_every_time_ends_the_turn(harness: Harness) -> None:
    conversation = harness.conv("crash-loop-tool")
    model = harness.script([{"tool_calls": [{"name": "crash", "input": {}}]}, {"text": "never"}])
    async with supervised(harness, TURNS_TOOLS=TOOLS) as workers:
        request = await harness.turns.submit(conversation, "crash it", model=model)
        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 240)
        assert result.status == "error", result
        assert result.error is not None
        assert result.error.type == WORKER_CRASH_LOOP, result.error
        assert result.error.stage == "tool"
        died = f"tool crash: the worker running it died {CRASH_RETRIES + 1} times"
        assert result.error.message.startswith(died), result.error.message
        runs = [r for r in harness.tool_runs() if r["tool"] == "crash"]
        assert len(runs) == CRASH_RETRIES + 1, "run once, then once per allowed retry"
        assert len({r["id"] for r in runs}) == 1
        assert [r["attempt"] for r in runs] == list(range(1, CRASH_RETRIES + 2))
        assert len(workers) >= CRASH_RETRIES + 2  # each run killed one
        # the user's message is kept and the conversation takes the next one
        messages = await (await harness.store()).messages(conversation)
        assert messages[0].role == "user" and messages[0].parts[0].text == "crash it"  # type: ignore[union-attr]
        after = await asyncio.wait_for(
            harness.send(conversation, "hello", model=harness.script([{"text": "still here"}])),
            60,
        )
        assert after.status == "completed" and after.text == "still here"
        roles = [m.role for m in await (await harness.store()).messages(conversation)]
        assert roles[0] == "user" and roles[-2:] == ["user", "assistant"]


async def test_model_step_outlives_more_worker_deaths_than_provider_tries(
    harness: Harness,
) -> None:
    """A deploy storm: the step's worker dies 4 times, more than the 3 tries a failing
    provider gets, fewer than the 6 deaths a crash loop gets; the turn completes."""
    kills = MODEL_TRIES + 1
    assert kills <= CRASH_RETRIES
    env = {
        "TURNS_HOOKS": "tests.support.crash_hooks:CrashingStep",
        "TEST_CRASH_FILE": str(harness.tmp / "kills.txt"),
        "TEST_CRASH_TIMES": str(kills),
    }
    conversation = harness.conv("crash-storm")
    async with supervised(harness, **env) as workers:
        model = harness.script([{"text": "made it"}])
        request = await harness.turns.submit(conversation, "hi", model=model)
        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 180)
    assert result.status == "completed", result.error
    assert result.text == "made it"
    assert len((harness.tmp / "kills.txt").read_text().splitlines()) == kills
    assert len(workers) == kills + 1
    attempts = await activity_attempts(harness, result.workflow_id, MODEL_STEP)
    assert attempts == list(range(1, kills + 2))
    roles = [m.role for m in await (await harness.store()).messages(conversation)]
    assert roles == ["user", "assistant"]


async def test_failing_provider_still_fails_after_its_few_tries(harness: Harness) -> None:
    conversation = harness.conv("crash-provider")
    error = {"message": "overloaded", "status": 529, "kind": "transient"}
    model = harness.script([{"error": error}])
    async with supervised(harness):
        request = await harness.turns.submit(conversation, "hi", model=model)
        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 120)
    assert result.status == "error"
    assert result.error is not None and result.error.type == "ProviderTransientError"
    assert result.error.stage == "stream"
    attempts = await activity_attempts(harness, result.workflow_id, MODEL_STEP)
    assert attempts == list(range(1, MODEL_TRIES + 1))
    assert await activity_attempts(harness, result.workflow_id, TOOL_CALL) == []
    roles = [m.role for m in await (await harness.store()).messages(conversation)]
    assert roles[0] == "user"


async def test_before_turn_that_kills_its_worker_on_some_input_ends_the_turn(
    harness: Harness,
) -> None:
    """``before_turn`` runs in ``begin_turn``, a local activity: its worker's death is seen
    when the workflow task times out (``TURN_TASK_TIMEOUT_S``, 2.5 s), and counted in the
    turn's stored record."""
    log = harness.tmp / "before_turn.txt"
    env = {
        "TURNS_HOOKS": "tests.support.crash_hooks:CrashingBeforeTurn",
        "TEST_CRASH_FILE": str(log),
    }
    conversation = harness.conv("crash-loop-hook")
    async with supervised(harness, **env):
        request = await harness.turns.submit(conversation, "please crash", model="demo:echo")
        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 300)
        assert result.status == "error", result
        assert result.error is not None and result.error.type == WORKER_CRASH_LOOP
        assert result.error.stage == "turn"
        assert result.error.message.startswith(
            f"begin turn (before_turn): the worker running it died {CRASH_RETRIES + 1} times"
        ), result.error.message
        calls = log.read_text().splitlines()
        assert calls == ["before_turn please crash"] * (CRASH_RETRIES + 1)
        [user] = await (await harness.store()).messages(conversation)
        assert user.text == "please crash"
        after = await asyncio.wait_for(harness.send(conversation, "hello", model="demo:echo"), 60)
        assert after.status == "completed", after.error
    roles = [m.role for m in await (await harness.store()).messages(conversation)]
    assert roles == ["user", "user", "assistant"]


async def test_on_step_finish_that_kills_its_worker_ends_the_turn(harness: Harness) -> None:
    """The last ``on_step_finish`` runs in ``finish_turn``, a local activity: past the
    budget the turn fails with ``WorkerCrashLoop``, keeping the reply the model streamed."""
    log = harness.tmp / "hooks.txt"
    env = {"TURNS_HOOKS": "tests.support.crash_hooks:CrashingEnd", "TEST_CRASH_FILE": str(log)}
    conversation = harness.conv("crash-loop-finish")
    async with supervised(harness, **env):
        request = await harness.turns.submit(
            conversation, "hi", model="demo:echo", request_id="crash-finish"
        )
        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 300)
        assert result.status == "error", result
        assert result.error is not None and result.error.type == WORKER_CRASH_LOOP
        assert result.error.stage == "persist"
        assert result.error.message.startswith(
            f"finish turn (on_step_finish): the worker running it died {CRASH_RETRIES + 1} times"
        ), result.error.message
        calls = log.read_text().splitlines()
        finish = ["on_step_finish crash-finish"] * (CRASH_RETRIES + 1)
        assert calls == [*finish, "on_chat_error crash-finish"]
        [user, reply] = await (await harness.store()).messages(conversation)
        assert user.text == "hi" and reply.text == "You said: hi"
        after = await asyncio.wait_for(harness.send(conversation, "again", model="demo:echo"), 60)
        assert after.status == "completed", after.error


async def test_on_chat_error_that_kills_its_worker_is_given_up(harness: Harness) -> None:
    """``on_chat_error`` runs in ``fail_turn``: past the budget the turn's own error is shown
    without it, and the conversation goes on."""
    log = harness.tmp / "hooks.txt"
    env = {"TURNS_HOOKS": "tests.support.crash_hooks:CrashingEnd", "TEST_CRASH_FILE": str(log)}
    conversation = harness.conv("crash-loop-fail")
    rejected = {"message": "bad request", "status": 400, "kind": "invalid_request"}
    async with supervised(harness, **env):
        request = await harness.turns.submit(
            conversation, "hi", model=harness.script([{"error": rejected}]), request_id="crash-fail"
        )
        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 300)
        assert result.status == "error", result
        assert result.error is not None and result.error.type == "ProviderError"
        assert "bad request" in result.error.message
        calls = log.read_text().splitlines()
        assert calls == ["on_chat_error crash-fail"] * (CRASH_RETRIES + 1)
        [user] = await (await harness.store()).messages(conversation)
        assert user.text == "hi"
        after = await asyncio.wait_for(harness.send(conversation, "again", model="demo:echo"), 60)
        assert after.status == "completed", after.error


async def test_on_chat_response_that_kills_its_worker_is_given_up(harness: Harness) -> None:
    """``on_chat_response`` runs after the turn, in the conversation's own activity: past
    the budget it is given up (a warning), the turn's result stands, the conversation goes
    on; before, Temporal retried it without limit. Each death is recovered by liveness (it
    waited out a 10 s heartbeat timeout before)."""
    log = harness.tmp / "hooks.txt"
    env = {"TURNS_HOOKS": "tests.support.crash_hooks:CrashingEnd", "TEST_CRASH_FILE": str(log)}
    conversation = harness.conv("crash-loop-respond")
    responses = CHAT_RESPONSE_CRASH_RETRIES + 1
    async with supervised(harness, **env) as workers:
        request = await harness.turns.submit(
            conversation, "hi", model="demo:echo", request_id="crash-respond"
        )
        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
        assert result.status == "completed" and result.text == "You said: hi"

        def given_up() -> bool:
            calls = log.read_text().splitlines() if log.exists() else []
            return calls.count("on_chat_response crash-respond") >= responses

        await wait_until(given_up, 300)
        handle = harness.client.get_workflow_handle(conversation)

        async def settled() -> bool:
            return not (await handle.describe()).raw_description.pending_activities

        await wait_until(settled, 60)
        calls = log.read_text().splitlines()
        assert calls.count("on_chat_response crash-respond") == responses
        assert len(workers) == responses + 1
        after = await asyncio.wait_for(harness.send(conversation, "again", model="demo:echo"), 60)
        assert after.status == "completed", after.error
        assert any(
            WORKER_CRASH_LOOP in w.log_tail(100_000)
            and "on_chat_response of turn 1" in w.log_tail(100_000)
            for w in workers
        )
        # each death was found by the next worker's liveness watch, not its heartbeat timeout
        found = [line for w in workers for line in w.log_tail(100_000).splitlines()]
        lost = [line for line in found if "liveness: turn" in line and "on_chat_response:" in line]
        assert len(lost) == responses and all("no liveness beat" in line for line in lost)
        # and its turn's stream, finished before, got no recovering event
        streams = await chunk_backend(harness)
        try:
            events = await streams.read(result.workflow_id)
        finally:
            await streams.close()
        assert events and events[-1].type == TURN_FINISH
        assert RECOVERING not in {e.type for e in events}


def test_a_query_refused_while_a_dead_workers_task_is_retried_is_asked_again() -> None:
    """Seen in CI: after a worker died mid-task, the server refuses queries until the task's
    next attempt completes (``FAILED_PRECONDITION`` with ``WorkflowNotReadyFailure``, these
    very bytes); ``TurnsClient.wait`` polls through it as through a query no worker answered.
    Other refusals with that status still raise."""
    raw = (
        b"\x08\t\x12>Unable to query workflow due to Workflow Task in failed state.\x1aJ\n"
        b"Htype.googleapis.com/temporal.api.errordetails.v1.WorkflowNotReadyFailure"
    )
    refused = RPCError("Unable to query …", RPCStatusCode.FAILED_PRECONDITION, raw)
    assert task_being_retried(refused)
    assert not task_being_retried(RPCError("other", RPCStatusCode.FAILED_PRECONDITION, b""))
    assert not task_being_retried(RPCError("gone", RPCStatusCode.NOT_FOUND, raw))
