"""Bad input gets a clear, typed error, loses nothing, and never wedges a conversation."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowUpdateFailedError

from durable_turns.messages import ToolResultPart
from tests.support.harness import Harness


async def _tool_result(harness: Harness, conversation: str) -> ToolResultPart:
    messages = await (await harness.store()).messages(conversation)
    return next(p for p in messages[-1].parts if isinstance(p, ToolResultPart))


async def test_tool_that_raises_becomes_a_tool_error(harness: Harness) -> None:
    harness.start_worker()
    model = harness.script(
        [{"tool_calls": [{"name": "explode", "input": {}}]}, {"text": "saw: {tool_result}"}]
    )
    result = await harness.send(harness.conv("c-raise"), "go", model=model)
    assert result.status == "completed"
    part = await _tool_result(harness, harness.conv("c-raise"))
    assert part.is_error and part.output == "RuntimeError: the tool exploded"
    assert "the tool exploded" in result.text  # the model saw the error and went on


async def test_unknown_tool_is_reported_to_the_model(harness: Harness) -> None:
    harness.start_worker()
    model = harness.script(
        [{"tool_calls": [{"name": "no_such_tool", "input": {}}]}, {"text": "ok: {tool_result}"}]
    )
    result = await harness.send(harness.conv("c-unknown"), "go", model=model)
    assert result.status == "completed"
    part = await _tool_result(harness, harness.conv("c-unknown"))
    assert part.is_error
    assert part.output.startswith('Unknown tool "no_such_tool". Available tools:')
    assert "get_weather" in part.output


async def test_invalid_tool_arguments_are_reported_to_the_model(harness: Harness) -> None:
    harness.start_worker()
    model = harness.script(
        [{"tool_calls": [{"name": "add", "input": {"a": "one"}}]}, {"text": "ok"}]
    )
    result = await harness.send(harness.conv("c-args"), "go", model=model)
    assert result.status == "completed"
    part = await _tool_result(harness, harness.conv("c-args"))
    assert part.is_error
    assert part.output.startswith('Invalid arguments for tool "add":')
    assert "a:" in part.output and "b: Field required" in part.output
    assert harness.tool_runs() == []  # the tool never ran with bad input


@pytest.mark.parametrize(
    "bad",
    [
        {"messages": "hello"},
        {"msgs": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "wizard", "content": "hi"}]},
        {"messages": []},
        "just a string",
        None,
    ],
)
async def test_malformed_signal_is_rejected_visibly(harness: Harness, bad: object) -> None:
    harness.start_worker()
    conversation = harness.conv("c-bad")
    await harness.client.start_workflow(
        "ConversationWorkflow",
        id=conversation,
        task_queue=harness.task_queue,
        start_signal="submitMessages",
        start_signal_args=[bad],
    )
    # the conversation keeps working for the next valid request
    result = await harness.send(conversation, "still there?", model="demo:echo")
    assert result.status == "completed" and result.text == "You said: still there?"
    state = await harness.turns.state(conversation)
    rejected = [r for r in state.recent if r.status == "rejected"]
    assert len(rejected) == 1
    assert rejected[0].error is not None
    assert rejected[0].error.type == "InvalidRequest"
    assert rejected[0].error.message.startswith("malformed request:")
    assert state.turn_count == 1


async def test_malformed_update_fails_the_caller_only(harness: Harness) -> None:
    harness.start_worker()
    await harness.send(harness.conv("c-bad-update"), "first", model="demo:echo")
    handle = harness.client.get_workflow_handle(harness.conv("c-bad-update"))
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update("sendMessage", {"messages": [{"role": "user"}]})
    assert "malformed request" in str(info.value.cause)
    result = await harness.send(harness.conv("c-bad-update"), "second", model="demo:echo")
    assert result.status == "completed" and result.turn_number == 2
    messages = await (await harness.store()).messages(harness.conv("c-bad-update"))
    assert [m.text for m in messages] == ["first", "You said: first", "second", "You said: second"]


async def test_oversized_request_is_rejected_not_wedged(harness: Harness) -> None:
    harness.start_worker()
    huge = "x" * 300_000
    await harness.turns.submit(harness.conv("c-huge"), huge, model="demo:echo")
    result = await harness.send(harness.conv("c-huge"), "small", model="demo:echo")
    assert result.status == "completed" and result.turn_number == 1
    state = await harness.turns.state(harness.conv("c-huge"))
    [rejected] = [r for r in state.recent if r.status == "rejected"]
    assert rejected.error is not None and "limit is 262144 bytes" in rejected.error.message


async def test_unknown_model_fails_the_turn_clearly(harness: Harness) -> None:
    harness.start_worker()
    result = await harness.send(harness.conv("c-model"), "hi", model="nosuch:model")
    assert result.status == "error"
    assert result.error is not None and result.error.type == "InvalidModel"
    assert "unknown model provider 'nosuch'" in result.error.message
    # the user's message is kept
    messages = await (await harness.store()).messages(harness.conv("c-model"))
    assert [m.text for m in messages] == ["hi"]
    assert (
        await harness.send(harness.conv("c-model"), "again", model="demo:echo")
    ).status == "completed"


async def test_provider_error_reaches_the_caller(harness: Harness) -> None:
    harness.start_worker()
    model = harness.script(
        [{"error": {"status": 401, "message": "invalid x-api-key", "kind": "auth"}}]
    )
    result = await harness.send(harness.conv("c-401"), "hi", model=model)
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ProviderError" and result.error.stage == "stream"
    assert "invalid x-api-key" in result.error.message


async def test_a_signal_of_an_unknown_name_is_rejected_visibly(harness: Harness) -> None:
    """A typo'd signal is a typed rejection in ``state``; before, the SDK kept it in memory
    waiting for a handler that never comes, and nobody saw it."""
    harness.start_worker()
    conversation = harness.conv("c-unknown-signal")
    await harness.send(conversation, "first", model="demo:echo")
    handle = harness.client.get_workflow_handle(conversation)
    await handle.signal("submitMessage", {"messages": [{"role": "user", "content": "hi"}]})
    result = await harness.send(conversation, "second", model="demo:echo")
    assert result.status == "completed" and result.turn_number == 2
    state = await harness.turns.state(conversation)
    [rejected] = [r for r in state.recent if r.status == "rejected"]
    assert rejected.error is not None and rejected.error.type == "UnknownSignal"
    assert "'submitMessage'" in rejected.error.message
    assert "submitMessages" in rejected.error.message  # names what it takes


async def test_a_folded_signal_sent_by_hand_is_each_of_its_signals(harness: Harness) -> None:
    """The name the worker's runner gives a folded burst is no back door: sent by a client,
    each of its payloads is checked and acts as its own signal would, in order."""
    harness.start_worker()
    conversation = harness.conv("c-folded-by-hand")
    await harness.send(conversation, "first", model="demo:echo")
    handle = harness.client.get_workflow_handle(conversation)
    ok = {
        "request_id": "r-ok",
        "messages": [{"role": "user", "content": "two"}],
        "model": "demo:echo",
    }
    await handle.signal(
        "durable_turns.folded:submitMessages", args=[{"messages": "nope"}, ok, "x" * 300_000]
    )
    result = await harness.turns.wait(conversation, "r-ok")
    assert result.status == "completed" and result.text == "You said: two"
    state = await harness.turns.state(conversation)
    errors = [r.error.type for r in state.recent if r.status == "rejected" and r.error]
    assert sorted(errors) == ["InvalidRequest", "RequestTooLarge"]
