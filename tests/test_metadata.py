"""Per-turn ``metadata`` (Think's ``ChatOptions.metadata``): a bounded JSON object on every
request, stored with the turn, on every hook context, in the result and the turn's details,
carried by continuations, regenerations and continue-as-new; rejected, typed, when it breaks
its rules."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from durable_turns.contract import (
    INVALID_REQUEST,
    MAX_METADATA_BYTES,
    InvalidMetadata,
    TurnInput,
    TurnResult,
    metadata_problem,
)
from tests.support.harness import ROOT, Harness
from tests.support.hooks import calls, start_worker, wait_for_hook
from tests.support.probes import recorded_result

META = {"user": "u-1", "trace": {"id": "t-9", "tags": ["a", "b"]}, "n": 3}
TOOL_THEN_TEXT = [
    {"text": "checking", "tool_calls": [{"name": "note", "input": {"text": "x"}}]},
    {"text": "done {tool_result}"},
]
HOOKS = (
    "before_turn",
    "before_step",
    "before_tool_call",
    "after_tool_call",
    "on_step_finish",
    "on_chunk",
    "on_chat_response",
)


def seen(harness: Harness) -> dict[str, set[str]]:
    """Per hook, the metadata values (as JSON text) its contexts carried."""
    out: dict[str, set[str]] = {}
    for call in harness.hook_calls():
        if "metadata" in call:
            out.setdefault(call["hook"], set()).add(json.dumps(call["metadata"], sort_keys=True))
    return out


async def test_every_hook_the_result_the_store_and_the_details_carry_it(
    harness: Harness,
) -> None:
    start_worker(harness)
    conversation = harness.conv("meta")
    result = await harness.send(
        conversation, "go", model=harness.script(TOOL_THEN_TEXT), metadata=META
    )
    assert result.status == "completed" and result.metadata == META
    await wait_for_hook(harness, "on_chat_response")
    expected = {json.dumps(META, sort_keys=True)}
    by_hook = seen(harness)
    for hook in HOOKS:
        assert by_hook.get(hook) == expected, hook
    turn = await (await harness.store()).get_turn(result.workflow_id)
    assert turn is not None and turn.metadata == META
    details = await harness.client.get_workflow_handle(result.workflow_id).describe()
    assert '**metadata**: `{"user": "u-1"' in (await details.static_details() or "")
    state = await harness.turns.state(conversation)
    assert state.last_result is not None and state.last_result.metadata == META


async def test_continuations_and_regenerations_carry_the_last_requests(
    harness: Harness,
) -> None:
    start_worker(harness)
    conversation = harness.conv("meta-carry")
    model = harness.script([{"text": "ok {user}"}])
    first = await harness.send(conversation, "one", model=model, metadata=META)
    assert first.metadata == META
    # a continuation without metadata: the last request's; with some: its own
    request = await harness.turns.continue_last_turn(conversation)
    cont = await harness.turns.wait(conversation, request)
    assert cont.continuation and cont.metadata == META
    request = await harness.turns.continue_last_turn(conversation, metadata={"k": 1})
    assert (await harness.turns.wait(conversation, request)).metadata == {"k": 1}
    # a regeneration without metadata: the last request's (not the continuation's)
    again = await harness.turns.regenerate(conversation)
    assert again.status == "completed" and again.metadata == META
    again = await harness.turns.regenerate(conversation, metadata={"why": "retry"})
    assert again.metadata == {"why": "retry"}
    # a request without metadata has none, and becomes the last request
    plain = await harness.send(conversation, "two", model=model)
    assert plain.metadata == {}
    request = await harness.turns.continue_last_turn(conversation)
    assert (await harness.turns.wait(conversation, request)).metadata == {}


async def test_a_failed_turn_and_on_chat_error_carry_it(harness: Harness) -> None:
    start_worker(harness)
    result = await harness.send(
        harness.conv("meta-fail"), "go", model="nosuch:model", metadata=META
    )
    assert result.status == "error" and result.metadata == META
    [error] = calls(harness, "on_chat_error")
    assert error["metadata"] == META


async def test_carried_over_continue_as_new(harness: Harness) -> None:
    start_worker(harness)
    conversation = harness.conv("meta-can")
    model = harness.script([{"text": "ok {user}"}])
    for i in range(6):
        await harness.send(conversation, f"m{i}", model=model, metadata={"i": i})
    runs = [w async for w in harness.client.list_workflows(f'WorkflowId="{conversation}"')]
    assert len(runs) >= 2, "the conversation handed over to a new run"
    # queued across a hand-over: each request keeps its own; a continuation the last one's
    queued = [
        await harness.turns.submit(conversation, f"q{i}", model=model, metadata={"q": i})
        for i in range(3)
    ]
    done = await asyncio.gather(*(harness.turns.wait(conversation, r) for r in queued))
    assert [d.metadata for d in done] == [{"q": 0}, {"q": 1}, {"q": 2}]
    for i in range(4):
        await harness.send(conversation, f"n{i}", model=model, metadata={"n": i})
    runs = [w async for w in harness.client.list_workflows(f'WorkflowId="{conversation}"')]
    assert len(runs) >= 3
    request = await harness.turns.continue_last_turn(conversation)
    assert (await harness.turns.wait(conversation, request)).metadata == {"n": 3}


async def test_a_turn_started_directly_carries_it_and_refuses_bad_metadata(
    harness: Harness,
) -> None:
    start_worker(harness)
    conversation = harness.conv("meta-direct")

    async def direct(n: int, metadata: Any) -> TurnResult:
        return await harness.client.execute_workflow(
            "TurnWorkflow",
            TurnInput(
                conversation_id=conversation,
                turn_number=n,
                new_messages=[{"role": "user", "parts": [{"type": "text", "text": "hi"}]}],  # type: ignore[list-item]
                model="demo:echo",
                metadata=metadata,
            ),
            id=f"{conversation}/turn-{n}",
            task_queue=harness.task_queue,
            result_type=TurnResult,
        )

    result = await direct(1, META)
    assert result.status == "completed" and result.metadata == META
    await wait_for_hook(harness, "on_chat_response", metadata=META)
    big = {"x": "y" * MAX_METADATA_BYTES}
    refused = await direct(2, big)
    assert refused.status == "error" and refused.error is not None
    assert refused.error.type == INVALID_REQUEST and "metadata is" in refused.error.message
    assert await (await harness.store()).get_turn(f"{conversation}/turn-2") is None


async def test_bad_metadata_is_a_typed_rejection(harness: Harness) -> None:
    start_worker(harness)
    conversation = harness.conv("meta-bad")
    too_big = {"x": "y" * MAX_METADATA_BYTES}
    # the Python client refuses before sending
    for bad in (too_big, {"f": math.nan}, {"s": {1, 2}}, ["not", "an", "object"]):
        with pytest.raises(InvalidMetadata):
            await harness.turns.send(conversation, "go", metadata=bad)  # type: ignore[arg-type]
    # any other client: an update is refused with InvalidRequest, a signal recorded as such
    handle = harness.client.get_workflow_handle(conversation)
    await harness.turns.send(conversation, "hello", model="demo:echo")
    raw = {"messages": [{"role": "user", "content": "go"}], "metadata": too_big}
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await handle.execute_update("sendMessage", raw)
    cause: Any = failed.value.cause
    assert cause.type == INVALID_REQUEST and "metadata: metadata is" in cause.message
    await handle.signal("submitMessages", {**raw, "metadata": [1, 2]})
    await handle.signal("continueLastTurn", {"metadata": "text"})

    async def rejected() -> list[str]:
        state = await harness.turns.state(conversation)
        return [r.error.message for r in state.recent if r.error and r.status == "rejected"]

    for _ in range(100):
        if len(await rejected()) >= 2:
            break
        await asyncio.sleep(0.1)
    messages = await rejected()
    assert len(messages) == 2 and all("metadata" in m for m in messages), messages
    assert (await harness.turns.state(conversation)).turn_count == 1


def test_the_rules() -> None:
    assert metadata_problem({}) is None and metadata_problem(META) is None
    at_limit = {"x": "y" * (MAX_METADATA_BYTES - len('{"x":""}'))}
    assert metadata_problem(at_limit) is None
    over = {"x": at_limit["x"] + "y"}
    assert metadata_problem(over) == (
        f"metadata is {MAX_METADATA_BYTES + 1} bytes as JSON; the limit is"
        f" {MAX_METADATA_BYTES} bytes"
    )
    assert "JSON values only" in (metadata_problem({"f": math.inf}) or "")
    assert "lone surrogate" in (metadata_problem({"s": "\ud800"}) or "")
    assert "keys must be strings" in (metadata_problem({1: 2}) or "")
    assert "JSON object" in (metadata_problem([1]) or "")


async def test_the_turns_command_sends_it(harness: Harness, tmp_path: Any) -> None:
    from tests.test_newcomer import turns

    harness.start_worker()
    conversation = harness.conv("meta-cli")
    # this checkout's code, and the workers' chunk stream (the reply is printed live)
    env = {"PYTHONPATH": str(ROOT), "TURNS_DATA_DIR": harness.env()["TURNS_DATA_DIR"]}
    meta = ("--metadata", '{"user": "u-42"}')
    out = await asyncio.to_thread(
        turns, harness, tmp_path, "chat", conversation, "hi", *meta, **env
    )
    assert out.returncode == 0, out.stderr
    last = await recorded_result(harness, conversation, turn=1)
    assert last.metadata == {"user": "u-42"}
    out = await asyncio.to_thread(turns, harness, tmp_path, "regenerate", conversation, **env)
    assert out.returncode == 0, out.stderr
    last = await recorded_result(harness, conversation, turn=2)
    assert last.metadata == {"user": "u-42"}
