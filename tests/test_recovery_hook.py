"""Recovery you can see and decide: the ``recovering`` stream event and ``on_chat_recovery``.

Every path on which a turn resumes after a lost attempt (a worker SIGKILLed mid-stream or
mid-tool, a stall before the first chunk, a bookkeeping step re-run) answers the user or
ends with a typed error, never ``skipped``; ``on_chat_recovery`` may stop it (``aborted``,
with what the lost attempt streamed). And ``continueLastTurn`` after a turn that failed
before replying answers the user's message.
"""

from __future__ import annotations

import asyncio
from typing import Any

from durable_turns.contract import TurnResult
from durable_turns.streams import live_events
from durable_turns.streams.base import StreamEvent
from tests.support.harness import Harness, WorkerProcess
from tests.support.history import activity_attempts
from tests.support.probes import chunk_backend, wait_until

HOOKS = "tests.support.hooks:RecordingHooks"
"""``on_chat_recovery`` answers the body's ``on_recovery``; ``raise_in`` fails a turn."""
TEXT = " ".join(f"word{i}" for i in range(30))


def recoveries(harness: Harness) -> list[dict[str, Any]]:
    return [c for c in harness.hook_calls() if c["hook"] == "on_chat_recovery"]


async def events_of(harness: Harness, workflow_id: str) -> list[StreamEvent]:
    streams = await chunk_backend(harness)
    try:
        return await streams.read(workflow_id)
    finally:
        await streams.close()


async def answered(harness: Harness, conversation: str, result: TurnResult) -> None:
    """The user's message is answered: the turn completed and its reply follows it."""
    assert result.status == "completed", result
    messages = await (await harness.store()).messages(conversation)
    assert [m.role for m in messages][-2:] == ["user", "assistant"]
    assert messages[-1].metadata["status"] == "completed"
    assert messages[-1].text.strip() == result.text


async def kill_once_streaming(harness: Harness, worker: WorkerProcess, turn: str, n: int) -> None:
    """SIGKILL ``worker`` once the turn's stream holds ``n`` text chunks of step 0."""

    async def streamed() -> bool:
        events = await events_of(harness, turn)
        return sum(1 for e in events if e.type == "chunk" and e.step == 0) >= n

    await wait_until(streamed, 60)
    worker.kill()


async def test_worker_killed_mid_stream_shows_recovering_then_answers(harness: Harness) -> None:
    first = harness.start_worker(TURNS_HOOKS=HOOKS)
    conversation = harness.conv("recover-stream")
    model = harness.script([{"text": TEXT, "delay_ms": 100}])
    request = await harness.turns.submit(conversation, "go", model=model)
    await kill_once_streaming(harness, first, f"{conversation}/turn-1", 4)
    harness.start_worker(TURNS_HOOKS=HOOKS)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 120)
    await answered(harness, conversation, result)
    assert result.text == TEXT
    # the hook was told, once, on the new worker: what was lost and what it had streamed
    [told] = recoveries(harness)
    assert told["pid"] != first.proc.pid
    assert (told["stage"], told["step"], told["attempt"]) == ("stream", 0, 2)
    assert told["reason"] == "worker_lost" and told["deaths"] == 1
    assert told["partial_text"] and TEXT.startswith(told["partial_text"])
    assert told["partial_parts"] == ["text"]
    # the stream says so before the new attempt: recovering, then reset, then the reply
    events = await events_of(harness, result.workflow_id)
    kinds = [e.type for e in events]
    at = kinds.index("recovering")
    assert kinds[at + 1] == "reset" and kinds.count("recovering") == 1
    recovering = events[at]
    assert recovering.step == 0 and recovering.attempt == 2
    assert recovering.data["stage"] == "stream" and recovering.data["reason"] == "worker_lost"
    assert any(e.type == "recovering" for e in live_events(events)), "readers keep it"
    assert kinds[-1] == "turn-finish" and events[-1].data["status"] == "completed"


async def test_on_chat_recovery_stop_ends_the_turn_aborted_with_the_partial(
    harness: Harness,
) -> None:
    first = harness.start_worker(TURNS_HOOKS=HOOKS)
    conversation = harness.conv("recover-stop")
    model = harness.script([{"text": TEXT, "delay_ms": 100}])
    request = await harness.turns.submit(
        conversation, "go", model=model, body={"on_recovery": "stop"}
    )
    await kill_once_streaming(harness, first, f"{conversation}/turn-1", 4)
    harness.start_worker(TURNS_HOOKS=HOOKS)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 120)
    assert result.status == "aborted" and result.error is None
    [told] = recoveries(harness)
    partial = told["partial_text"]
    assert partial and TEXT.startswith(partial)
    # what it has: the lost attempt's text, kept as the aborted reply; the model not asked again
    [user, reply] = await (await harness.store()).messages(conversation)
    assert user.text == "go"
    assert reply.metadata["status"] == "aborted" and reply.text == partial
    assert result.text == partial.strip()
    assert await activity_attempts(harness, result.workflow_id, "model_step") == [1, 2]
    events = await events_of(harness, result.workflow_id)
    kinds = [e.type for e in events]
    assert "recovering" in kinds and "reset" not in kinds, "no new attempt streamed"
    assert events[-1].type == "turn-finish" and events[-1].data["status"] == "aborted"


async def test_stall_before_the_first_chunk_is_a_recovery_that_answers(harness: Harness) -> None:
    # Think's #1941/#2105: a stall before the first chunk, then a continuation that found the
    # user's message last and skipped. Here the step is asked again and answers.
    harness.start_worker(TURNS_HOOKS=HOOKS, TURNS_STALL_TIMEOUT_MS="500")
    conversation = harness.conv("recover-stall")
    model = harness.script([{"text": "finally here", "stall_s": 30, "attempts": 1}])
    result = await harness.send(conversation, "hello?", model=model)
    await answered(harness, conversation, result)
    assert result.text == "finally here"
    [told] = recoveries(harness)
    assert (told["stage"], told["attempt"], told["reason"]) == ("stream", 2, "stalled")
    assert told["partial_text"] == "" and told["deaths"] == 0
    assert "before the first chunk" in told["error"]
    events = await events_of(harness, result.workflow_id)
    [recovering] = [e for e in events if e.type == "recovering"]
    assert recovering.data["reason"] == "stalled"


async def test_a_hook_that_raises_or_answers_nonsense_goes_on(harness: Harness) -> None:
    harness.start_worker(TURNS_HOOKS=HOOKS, TURNS_STALL_TIMEOUT_MS="500")
    for answer in ("raise", "maybe"):
        conversation = harness.conv(f"recover-{answer}")
        model = harness.script([{"text": "here", "stall_s": 30, "attempts": 1}])
        result = await harness.send(conversation, "hi", model=model, body={"on_recovery": answer})
        await answered(harness, conversation, result)
    assert len(recoveries(harness)) == 2


async def test_tool_rerun_after_a_kill_is_a_recovery(harness: Harness) -> None:
    first = harness.start_worker(TURNS_HOOKS=HOOKS)
    conversation = harness.conv("recover-tool")
    model = harness.script(
        [
            {"tool_calls": [{"name": "slow", "input": {"seconds": 4}, "id": "call_s"}]},
            {"text": "done: {tool_result}"},
        ]
    )
    request = await harness.turns.submit(conversation, "nap", model=model)
    await wait_until(lambda: any(r["tool"] == "slow" for r in harness.tool_runs()), 60)
    first.kill()
    harness.start_worker(TURNS_HOOKS=HOOKS)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 120)
    await answered(harness, conversation, result)
    assert result.text == "done: slept 4.0s"
    [told] = recoveries(harness)
    assert (told["stage"], told["step"], told["attempt"]) == ("tool", 0, 2)
    assert (told["tool_call_id"], told["tool_name"]) == ("call_s", "slow")
    assert told["tool_input"] == {"seconds": 4} and told["reason"] == "worker_lost"
    events = await events_of(harness, result.workflow_id)
    [recovering] = [e for e in events if e.type == "recovering"]
    assert recovering.data["tool_call_id"] == "call_s" and recovering.data["stage"] == "tool"


async def test_on_chat_recovery_stop_before_a_tool_runs_again(harness: Harness) -> None:
    first = harness.start_worker(TURNS_HOOKS=HOOKS)
    conversation = harness.conv("recover-tool-stop")
    model = harness.script(
        [
            {"text": "Napping.", "tool_calls": [{"name": "slow", "input": {"seconds": 4}}]},
            {"text": "never"},
        ]
    )
    request = await harness.turns.submit(
        conversation, "nap", model=model, body={"on_recovery": "stop"}
    )
    await wait_until(lambda: any(r["tool"] == "slow" for r in harness.tool_runs()), 60)
    first.kill()
    harness.start_worker(TURNS_HOOKS=HOOKS)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 120)
    assert result.status == "aborted" and result.error is None
    assert [r["phase"] for r in harness.tool_runs()] == ["start"], "the tool did not run again"
    [_, reply] = await (await harness.store()).messages(conversation)
    assert reply.metadata["status"] == "aborted" and reply.text.startswith("Napping.")
    assert await activity_attempts(harness, result.workflow_id, "model_step") == [1]


async def test_continue_after_a_turn_that_failed_before_replying_answers_the_user(
    harness: Harness,
) -> None:
    harness.start_worker(TURNS_HOOKS=HOOKS)
    conversation = harness.conv("continue-answers")
    model = harness.script([{"text": "the answer to {user}"}])
    failed = await harness.send(
        conversation, "the question", model=model, body={"raise_in": "before_turn"}
    )
    assert failed.status == "error" and failed.error is not None
    assert failed.error.type == "HookError"
    request = await harness.turns.continue_last_turn(conversation, body={})
    second = await harness.turns.wait(conversation, request)
    await answered(harness, conversation, second)
    assert second.text == "the answer to the question" and not second.continuation
    messages = await (await harness.store()).messages(conversation)
    assert [m.role for m in messages] == ["user", "assistant"]
    # before_turn saw an answer to the message, not a continuation of a reply
    last = [c for c in harness.hook_calls() if c["hook"] == "before_turn"][-1]
    assert last["continuation"] is False
