"""Liveness (``streams.liveness``): a SIGKILLed worker's model step or tool call is recovered
by another worker from the liveness records in the chunk stream, long before its heartbeat
timeout; a SIGTERMed worker hands its model step over at once; a worker whose event loop is
merely blocked is not declared dead."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any, cast

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client
from temporalio.exceptions import ActivityError, ApplicationError, RetryState

from bench.scale import sse_body
from durable_turns.contract import HANDED_OVER_KEY, SHARE_KEY, turn_workflow_id
from durable_turns.messages import ToolResultPart
from durable_turns.streams.base import MemoryBackend, live_events
from durable_turns.streams.liveness import AttemptRecord, Liveness
from durable_turns.workflows.options import is_handed_over
from testkit.llm_server import LLMServer, Reply
from tests.support.harness import Harness, WorkerProcess
from tests.support.history import activity_attempts
from tests.support.probes import chunk_backend, wait_until

WORDS = " ".join(f"w{i}" for i in range(40))


async def running_step_pid(harness: Harness, workflow_id: str, kind: str = "model_step") -> int:
    """The pid of the worker running the turn's activity of type ``kind``, once started."""
    handle = harness.client.get_workflow_handle(workflow_id)
    pid = 0

    async def started() -> bool:
        nonlocal pid
        try:
            desc = await handle.describe()
        except Exception:
            return False
        for act in desc.raw_description.pending_activities:
            if (
                act.activity_type.name == kind
                and act.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                and act.last_worker_identity
            ):
                pid = int(act.last_worker_identity.split("@", 1)[0])
                return True
        return False

    await wait_until(started, within=60)
    return pid


async def test_sigkill_mid_stream_is_recovered_before_the_heartbeat_timeout(
    harness: Harness,
) -> None:
    # A heartbeat timeout of 120 s: only liveness can retry the step within the test's wait.
    victim, conversation, request, streams = await _mid_stream_on_two(harness, "liveness")
    workflow_id = turn_workflow_id(conversation, 1)
    try:
        seen = await _seen(streams, workflow_id)
        victim.kill()
        # the first attempt failed as a heartbeat timeout would, but by a liveness watcher:
        # ActivityTaskFailed (not TimedOut), its cause naming the missed liveness beats
        failed = await _whole_once_after_one_failure(harness, conversation, request, workflow_id)
        assert "no liveness beat" in failed.message
        assert failed.application_failure_info.type == "WorkerLost"
        # a first loss liveness detected is retried at once: its detection was the wait
        history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
        assert EventType.EVENT_TYPE_TIMER_STARTED not in [e.event_type for e in history.events]
        # the stream: one recovering event (the watcher's; the new attempt's is the same
        # batch), and the live events hold the reply once
        events = await streams.read(workflow_id)
        [recovering] = [e for e in events if e.type == "recovering"]
        assert recovering.data["reason"] == "worker_lost" and recovering.data["deaths"] == 1
        assert recovering.attempt == 2 and "no liveness beat" in recovering.data["message"]
        text = "".join(e.data.get("text", "") for e in live_events(events) if e.type == "chunk")
        assert text.split() == WORDS.split()
        _went_on_from(events, seen)
    finally:
        await streams.close()


async def test_sigkill_mid_tool_is_recovered_before_the_heartbeat_timeout(
    harness: Harness,
) -> None:
    """A tool call's attempt is recorded as a model step's is: a SIGKILL mid-tool with
    another worker alive is found by its missed liveness beats, the call fails as
    ``WorkerLost`` (counted as its heartbeat timeout of 120 s would have been) and runs again
    on the other worker, with the same call id; the turn ends with its result, once."""
    victim, conversation, request = await _mid_tool_on_two(
        harness, "liveness-tool", TURNS_STALL_TIMEOUT_MS="240000"
    )
    workflow_id = turn_workflow_id(conversation, 1)
    streams = await chunk_backend(harness)
    try:
        victim.kill()
        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 90)
        assert result.status == "completed"
        assert result.text == "result: slept 4.0s"
        harness.assert_tool_ran_again_to_its_end_once()
        messages = await (await harness.store()).messages(conversation)
        assert [m.role for m in messages] == ["user", "assistant"]
        assert len([p for p in messages[1].parts if isinstance(p, ToolResultPart)]) == 1
        # failed by a liveness watcher (ActivityTaskFailed WorkerLost), not timed out
        history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
        types = [e.event_type for e in history.events]
        assert EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT not in types
        [failed] = [
            e.activity_task_failed_event_attributes.failure
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
        ]
        assert failed.application_failure_info.type == "WorkerLost"
        assert "no liveness beat" in failed.message
        assert await activity_attempts(harness, workflow_id, "tool_call") == [1, 2]
        # the stream: the tool's recovering event once (the watcher's; the next attempt's
        # own is the same batch), and its result once
        events = await streams.read(workflow_id)
        [recovering] = [e for e in events if e.type == "recovering"]
        assert recovering.data["stage"] == "tool" and recovering.data["tool_name"] == "slow"
        [first, *_] = [r for r in harness.tool_runs() if r["phase"] == "start"]
        assert recovering.data["tool_call_id"] == first["id"]
        assert recovering.data["reason"] == "worker_lost" and recovering.data["deaths"] == 1
        assert recovering.attempt == 2 and "no liveness beat" in recovering.data["message"]
        assert sum(e.type == "tool-result" for e in live_events(events)) == 1
    finally:
        await streams.close()


async def test_sigterm_mid_tool_leaves_the_tool_to_its_grace(harness: Harness) -> None:
    """A deploy's SIGTERM mid-tool, another worker alive: the tool call is not handed over
    (a tool may not be safe to run twice) nor declared lost while its worker drains; it ends
    within the grace where it runs, once, and the turn goes on."""
    victim, conversation, request = await _mid_tool_on_two(
        harness, "liveness-tool-term", TURNS_SHUTDOWN_GRACE_S="60"
    )
    workflow_id = turn_workflow_id(conversation, 1)
    victim.terminate()
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 90)
    assert result.status == "completed" and result.text == "result: slept 4.0s"
    assert [r["phase"] for r in harness.tool_runs()] == ["start", "end"], "ran once, whole"
    assert await asyncio.to_thread(victim.proc.wait, 60) == 0, victim.log_tail()
    assert await activity_attempts(harness, workflow_id, "tool_call") == [1]
    history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
    types = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED not in types
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT not in types


async def test_sigterm_mid_stream_hands_the_step_over_at_once(harness: Harness) -> None:
    """A deploy's SIGTERM with another worker alive: the dying worker fails its running
    model step itself (``Liveness.hand_over``) instead of streaming on for the grace, and
    exits without waiting for it; the step runs again on the other worker, whole, once."""
    # a grace and a heartbeat timeout far past the test's waits: only the hand-over moves it
    victim, conversation, request, streams = await _mid_stream_on_two(
        harness, "handover", TURNS_SHUTDOWN_GRACE_S="300"
    )
    workflow_id = turn_workflow_id(conversation, 1)
    try:
        seen = await _seen(streams, workflow_id)
        victim.terminate()
        # it exits without waiting out its 300 s grace for the step
        assert await asyncio.to_thread(victim.proc.wait, 60) == 0, victim.log_tail()
        # the first attempt failed by the hand-over (not cancelled after a grace, nor timed out)
        failed = await _whole_once_after_one_failure(harness, conversation, request, workflow_id)
        assert failed.application_failure_info.type == "WorkerShutdown"
        assert "handed over" in failed.message
        # the turn retried it with no timer (patch handover), not after the 1 s of a loss
        history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
        types = [e.event_type for e in history.events]
        assert EventType.EVENT_TYPE_TIMER_STARTED not in types
        assert any(
            e.marker_recorded_event_attributes.marker_name == "core_patch" for e in history.events
        )
        # the stream: one recovering event, and the live events hold the reply once
        events = await streams.read(workflow_id)
        [recovering] = [e for e in events if e.type == "recovering"]
        assert recovering.data["reason"] == "worker_shutdown" and recovering.attempt == 2
        text = "".join(e.data.get("text", "") for e in live_events(events) if e.type == "chunk")
        assert text.split() == WORDS.split()
        _went_on_from(events, seen)
        assert "handed over" in victim.log_tail(200_000)
    finally:
        await streams.close()


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_a_handed_over_step_goes_on_from_what_was_streamed(
    harness: Harness, api: str
) -> None:
    """Through the real SDKs: Anthropic's next attempt sends what the user saw as an
    assistant prefill and streams only the rest (the reply keeps the text, once); OpenAI's
    chat API has no prefill, so its step starts again and the reset rewinds the text."""
    server = LLMServer().start()
    body = sse_body(40) if api == "anthropic" else _chat_sse(40)
    server.push(Reply(body=body, first_token_s=0.1, tokens_per_s=10, times=2))
    env = {
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "sk-test",
        "TURNS_SHUTDOWN_GRACE_S": "300",
    }
    model = "anthropic:claude-test-model" if api == "anthropic" else "openai:gpt-test"
    victim, conversation, request, streams = await _mid_stream_on_two(
        harness, f"handover-{api}", model=model, **env
    )
    workflow_id = turn_workflow_id(conversation, 1)
    try:
        seen = await _seen(streams, workflow_id)
        victim.terminate()
        await _whole_once_after_one_failure(harness, conversation, request, workflow_id)
        events = await streams.read(workflow_id)
        text = "".join(e.data.get("text", "") for e in live_events(events) if e.type == "chunk")
        assert text.split() == WORDS.split()
        last = server.requests[-1].body["messages"][-1]
        if api == "anthropic":
            kept = _went_on_from(events, seen)
            assert last["role"] == "assistant" and last["content"][0]["text"] == kept
        else:  # from scratch: the next attempt's first chunk is the reply's first word
            assert last["role"] == "user"
            assert _retried_text(events)[0] == "w0 "
    finally:
        await streams.close()
        server.stop()


def _chat_sse(tokens: int) -> str:
    """An OpenAI chat stream of ``tokens`` content deltas, ``w0 w1 …``."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        data = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test"}
        return f"data: {json.dumps({**data, 'choices': [choice]}, separators=(',', ':'))}\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": f"w{k} "}) for k in range(tokens)]
    return "".join([*out, chunk({}, "stop"), "data: [DONE]\n\n"])


async def _seen(streams: Any, workflow_id: str) -> str:
    """The text a reader of the turn's stream has seen so far."""
    events = await streams.read(workflow_id)
    return "".join(e.data.get("text", "") for e in live_events(events) if e.type == "chunk")


def _retried_text(events: list[Any]) -> list[str]:
    return [
        e.data["text"]
        for e in events
        if e.type == "chunk" and e.attempt == 2 and e.data.get("type") == "text-delta"
    ]


def _went_on_from(events: list[Any], seen: str) -> str:
    """The next attempt went on from what the lost one streamed: its first chunk is that
    text (at least all the reader had seen before the signal, less trailing white space),
    and what follows is the rest of the reply. Returns the kept text."""
    kept = _retried_text(events)[0]
    assert seen.strip() and kept.startswith(seen.rstrip()), (kept, seen)
    assert WORDS.startswith(kept) and not kept.endswith(" ")
    return kept


async def _mid_stream_on_two(
    harness: Harness, name: str, model: str | None = None, **env: str
) -> tuple[WorkerProcess, str, str, Any]:
    """Two workers (a 120 s heartbeat timeout), a turn streaming a paced reply (``model``,
    by default a demo script of ``WORDS``) on one of them, a few chunks out: that worker,
    the conversation, the request and the chunk stream (the caller closes it)."""
    env = {"TURNS_HEARTBEAT_TIMEOUT_S": "120", "TURNS_STALL_TIMEOUT_MS": "240000", **env}
    workers = [harness.start_worker(**env), harness.start_worker(**env)]
    model = model or harness.script([{"text": WORDS, "delay_ms": 100}])
    conversation = harness.conv(name)
    request = await harness.turns.submit(conversation, "count", model=model)
    workflow_id = turn_workflow_id(conversation, 1)
    pid = await running_step_pid(harness, workflow_id)
    streams = await chunk_backend(harness)
    try:
        await wait_until(lambda: _chunks(streams, workflow_id, at_least=5), within=60)
    except BaseException:
        await streams.close()
        raise
    [victim] = [w for w in workers if w.proc.pid == pid]
    return victim, conversation, request, streams


async def _mid_tool_on_two(
    harness: Harness, name: str, **env: str
) -> tuple[WorkerProcess, str, str]:
    """Two workers (a 120 s heartbeat timeout), a turn whose tool call (4 s) has started on
    one of them: that worker, the conversation and the request."""
    env = {"TURNS_HEARTBEAT_TIMEOUT_S": "120", **env}
    workers = [harness.start_worker(**env), harness.start_worker(**env)]
    model = harness.script(
        [
            {"tool_calls": [{"name": "slow", "input": {"seconds": 4}}]},
            {"text": "result: {tool_result}"},
        ]
    )
    conversation = harness.conv(name)
    request = await harness.turns.submit(conversation, "go", model=model)
    pid = await running_step_pid(harness, turn_workflow_id(conversation, 1), "tool_call")
    await wait_until(lambda: any(r["phase"] == "start" for r in harness.tool_runs()), within=60)
    [victim] = [w for w in workers if w.proc.pid == pid]
    return victim, conversation, request


async def _whole_once_after_one_failure(
    harness: Harness, conversation: str, request: str, workflow_id: str
) -> Any:
    """The turn completed with the reply whole, once, after one failed model-step attempt
    (neither timed out nor cancelled): that attempt's failure."""
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 90)
    assert result.status == "completed"
    assert result.text.split() == WORDS.split(), "one reply, whole, once"
    messages = await (await harness.store()).messages(conversation)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].text.split() == WORDS.split()
    assert await activity_attempts(harness, workflow_id, "model_step") == [1, 2]
    history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
    types = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT not in types
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED not in types
    [failed] = [
        e.activity_task_failed_event_attributes.failure
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    return failed


async def _chunks(streams: Any, workflow_id: str, at_least: int) -> bool:
    events = await streams.read(workflow_id)
    return sum(e.type == "chunk" for e in events) >= at_least


def _liveness(backend: MemoryBackend, worker: str, lost_after_s: float) -> Liveness:
    return Liveness(
        backend,
        lambda: MemoryBackend(backend.name),
        cast(Client, None),  # never used: no attempt is recovered here
        worker,
        lost_after_s,
    )


async def test_a_blocked_event_loop_is_not_a_death_but_silence_is() -> None:
    backend = MemoryBackend(f"liveness-{uuid.uuid4().hex[:6]}")
    busy = _liveness(backend, "busy", 0.3)
    watcher = _liveness(backend, "watcher", 0.3)
    await busy.start()
    seen: list[list[str]] = []
    stop = threading.Event()

    def watch() -> None:  # the watcher's checks, on a loop the blocked one does not hold
        async def looking() -> None:
            while not stop.is_set():
                seen.append(await watcher.check())
                await asyncio.sleep(0.05)

        asyncio.run(looking())

    looker = threading.Thread(target=watch)
    looker.start()
    try:
        await asyncio.sleep(0.2)
        time.sleep(1.2)  # noqa: ASYNC251 -- the busy worker's event loop blocked 4× the lost-after time
        await asyncio.sleep(0.2)
        assert seen and not any(seen), "a blocked loop still beats (its own thread)"
        await busy.stop(forget=False)  # as a SIGKILL: silent, found within lost-after
        await wait_until(lambda: any("busy" in s for s in seen), within=10)
    finally:
        stop.set()
        await asyncio.to_thread(looker.join)


async def test_a_watcher_judges_silence_only_over_a_span_it_watched() -> None:
    """A watcher whose reads stopped for a while (its loop starved, the backend stalled,
    which holds every worker's beats back) starts its clocks again instead of finding every
    worker silent at once; a worker that stays silent while it watches is found."""
    backend = MemoryBackend(f"liveness-{uuid.uuid4().hex[:6]}")
    watcher = _liveness(backend, "watcher", 0.3)
    await backend.beat("other")
    assert await watcher.check() == []
    await asyncio.sleep(0.5)  # no read for longer than lost-after: a gap, not a silence
    assert await watcher.check() == [], "a gap in the watch is not a death"
    found: list[str] = []
    for _ in range(20):  # watched every 0.05 s, "other" silent: found after 0.3 s
        await asyncio.sleep(0.05)
        found += await watcher.check()
        if found:
            break
    assert found == ["other"]


async def test_a_dead_workers_attempt_is_taken_by_one_watcher() -> None:
    backend = MemoryBackend(f"liveness-{uuid.uuid4().hex[:6]}")
    record = AttemptRecord(
        "dG9rZW4=", "w/turn-1", "run", "default", "w/turn-1", None, False, 0, 1, 0
    )
    await backend.beat("dead")
    await backend.attempt_started("dead", "run/1", record.body())
    assert await backend.take_attempt("dead", "run/1")
    assert not await backend.take_attempt("dead", "run/1"), "a second watcher gets nothing"
    assert await backend.attempts_of("dead") == {}
    assert AttemptRecord.parse(record.body()) == record
    # the recovering event's writer is the one the next attempt's own announce uses
    writer, attempt, deaths = record.recovering_writer()
    assert (writer, attempt, deaths) == ("run/recovering:stream:0::2:1", 2, 1)
    # a tool call's: its stage and call id, as announce names a tool call's
    tool = AttemptRecord.parse(record.body())
    tool.stage, tool.tool_call_id, tool.tool_name = "tool", "call-1", "slow"
    assert AttemptRecord.parse(tool.body()) == tool
    assert tool.recovering_writer()[0] == "run/recovering:tool:0:call-1:2:1"


@pytest.mark.parametrize("kind", ["sqlite"])
async def test_sqlite_keeps_liveness_records(tmp_path: Any, kind: str) -> None:
    from durable_turns.streams.sqlite import SQLiteStreamBackend

    async with SQLiteStreamBackend(tmp_path / "chunks.db") as backend:
        await backend.beat("a")
        await backend.beat("a")
        await backend.beat("b")
        assert await backend.beats() == {"a": 2, "b": 1}
        await backend.attempt_started("a", "k", "{}")
        assert await backend.attempts_of("a") == {"k": "{}"}
        assert await backend.take_attempt("a", "k") and not await backend.take_attempt("a", "k")
        await backend.forget_worker("a")
        assert await backend.beats() == {"b": 1}


def test_a_hand_over_is_told_apart_from_a_shutdown_past_its_grace() -> None:
    def failed(cause: ApplicationError) -> ActivityError:
        err = ActivityError(
            "activity failed",
            scheduled_event_id=1,
            started_event_id=2,
            identity="w",
            activity_type="model_step",
            activity_id="1",
            retry_state=RetryState.MAXIMUM_ATTEMPTS_REACHED,
        )
        err.__cause__ = cause
        return err

    handed = {SHARE_KEY: "w", HANDED_OVER_KEY: True}
    assert is_handed_over(failed(ApplicationError("x", handed, type="WorkerShutdown")))
    assert not is_handed_over(failed(ApplicationError("x", type="WorkerShutdown")))
    assert not is_handed_over(failed(ApplicationError("x", handed, type="WorkerLost")))
    assert not is_handed_over(
        failed(ApplicationError("x", {HANDED_OVER_KEY: 1}, type="WorkerShutdown"))
    )


async def test_a_worker_that_ran_plain_def_hooks_and_tools_exits_at_once(harness: Harness) -> None:
    """Plain-``def`` hooks and tools run on thread pools whose idle threads wait for work; a
    stopping worker tells them to end before it leaves (joining its threads, no interpreter
    teardown: ``durable_turns.entry``). Before, such a worker said "worker stopped" and hung
    until it was killed."""
    calls = harness.tmp / "hooks.txt"
    worker = harness.start_worker(
        TURNS_HOOKS="tests.support.crash_hooks:CrashingEnd",  # plain-def hooks, not crashing
        TEST_CRASH_FILE=str(calls),
        TURNS_TOOLS="tests.support.tools,tests.support.sync_tools",
    )
    model = harness.script(
        [{"tool_calls": [{"name": "block_sync", "input": {"seconds": 0}}]}, {"text": "done"}]
    )
    result = await harness.send(harness.conv("threads"), "go", model=model)
    assert result.status == "completed", result.error
    assert [r["tool"] for r in harness.tool_runs()] == ["block_sync"]

    def responded() -> bool:
        return calls.exists() and "on_chat_response" in calls.read_text()

    await wait_until(responded, 30)
    began = time.monotonic()
    worker.terminate()
    assert await asyncio.to_thread(worker.proc.wait, 30) == 0, worker.log_tail()
    assert time.monotonic() - began < 10
    assert "worker stopped" in worker.log_tail()
