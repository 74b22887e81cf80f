"""Context overflow: reactive compact-and-retry, proactive compaction, compact_after."""

from __future__ import annotations

import asyncio

from tests.support.harness import Harness
from tests.support.history import prior_transcript, scheduled
from tests.support.probes import wait_until

HOOKS = "tests.support.compaction_hooks:CompactingHooks"
TOO_LONG = {
    "status": 400,
    "kind": "context_overflow",
    "message": "prompt is too long: 213450 tokens > 200000 maximum",
}


def compactions(harness: Harness) -> list[dict]:
    return [c for c in harness.hook_calls() if c["hook"] == "on_compaction"]


async def test_reactive_overflow_compacts_and_reruns_the_turn(harness: Harness) -> None:
    harness.start_worker(TURNS_HOOKS=HOOKS)
    conversation = harness.conv("overflow")
    store = await harness.store()
    prior = prior_transcript(20_000)
    await store.add_messages(conversation, prior)
    model = harness.script(
        [
            {
                "text": "answered after compaction",
                "error": {**TOO_LONG, "if_input_tokens_over": 5_000},
            }
        ]
    )
    result = await harness.send(conversation, "and now?", model=model)
    assert result.status == "completed", result.error
    assert result.text == "answered after compaction"
    names = await scheduled(harness, result.workflow_id)
    assert names.count("model_step") == 2 and names.count("compact") == 1
    assert names.count("begin_turn") == 2, "the turn re-ran from before_turn"
    assert len(compactions(harness)) == 1
    messages = await store.messages(conversation)
    summaries = [m for m in messages if "compaction" in m.metadata]
    assert len(summaries) == 1 and "summary of" in summaries[0].text
    assert len(messages) == len(prior) + 3, "nothing deleted: prior, user, summary, reply"
    assert messages[-1].text == "answered after compaction"
    assert result.usage.input_tokens < 40_000


async def test_second_overflow_ends_the_turn_with_the_classification(harness: Harness) -> None:
    harness.start_worker(TURNS_HOOKS=HOOKS)
    conversation = harness.conv("overflow-twice")
    await (await harness.store()).add_messages(conversation, prior_transcript(20_000))
    model = harness.script([{"text": "never", "error": TOO_LONG}])
    result = await harness.send(conversation, "and now?", model=model)
    assert result.status == "error"
    assert result.error is not None
    assert result.error.classification == "context_overflow"
    assert "prompt is too long" in result.error.message
    names = await scheduled(harness, result.workflow_id)
    assert names.count("model_step") == 2 and names.count("compact") == 1  # Think's test
    messages = await (await harness.store()).messages(conversation)
    assert messages[-2].text == "and now?" or messages[-1].text == "and now?", "user message kept"


async def test_overflow_without_reactive_recovery_is_a_plain_error(harness: Harness) -> None:
    harness.start_worker()
    model = harness.script([{"text": "never", "error": TOO_LONG}])
    result = await harness.send(harness.conv("no-reactive"), "hi", model=model)
    assert result.status == "error" and result.error is not None
    assert "compact" not in await scheduled(harness, result.workflow_id)


async def test_compaction_that_does_not_shorten_ends_the_turn(harness: Harness) -> None:
    harness.start_worker(TURNS_HOOKS=HOOKS)
    # a brand-new conversation: nothing to fold, so compaction cannot help
    model = harness.script([{"text": "never", "error": TOO_LONG}])
    result = await harness.send(harness.conv("no-shorten"), "hi", model=model)
    assert result.status == "error" and result.error is not None
    assert result.error.classification == "context_overflow"
    assert "compaction did not shorten the context" in result.error.message


async def test_proactive_compaction_before_the_next_step(harness: Harness) -> None:
    harness.start_worker(TURNS_HOOKS=HOOKS, TEST_OVERFLOW="proactive:10000")
    conversation = harness.conv("proactive")
    await (await harness.store()).add_messages(conversation, prior_transcript(20_000))
    model = harness.script(
        [
            {"tool_calls": [{"name": "add", "input": {"a": 1, "b": 2}}]},
            {"text": "done: {tool_result}"},
        ]
    )
    result = await harness.send(conversation, "sum", model=model)
    assert result.status == "completed" and result.text == "done: 3"
    names = await scheduled(harness, result.workflow_id)
    assert names == [
        "begin_turn",
        "model_step",
        "tool_call",
        "compact",
        "model_step",  # it finished the turn too: no on_step_finish runs (last_step)
    ]
    assert len(compactions(harness)) == 1


async def test_compact_after_compacts_between_turns(harness: Harness) -> None:
    harness.start_worker(TURNS_HOOKS=HOOKS, TEST_OVERFLOW="compact_after:5000")
    conversation = harness.conv("compact-after")
    await (await harness.store()).add_messages(conversation, prior_transcript(20_000))
    result = await harness.send(conversation, "hello", model="demo:echo")
    assert result.status == "completed"
    assert result.usage.input_tokens < 5_000, "the model saw the compacted context"
    assert len(compactions(harness)) == 1


async def test_overflow_recovery_works_on_continuation_turns(harness: Harness) -> None:
    harness.start_worker(TURNS_HOOKS=HOOKS)
    conversation = harness.conv("overflow-cont")
    store = await harness.store()
    model = harness.script(
        [
            {"text": "part one"},
            {"text": "part two", "error": {**TOO_LONG, "if_input_tokens_over": 5_000}},
        ]
    )
    await harness.send(conversation, "write", model=model)
    await store.add_messages(conversation, prior_transcript(20_000))  # the context grew
    request = await harness.turns.continue_last_turn(conversation)
    result = await harness.turns.wait(conversation, request)
    assert result.status == "completed" and result.continuation
    assert result.text == "part two"
    assert (await scheduled(harness, result.workflow_id)).count("compact") == 1


async def test_kill_during_compaction(harness: Harness) -> None:
    first = harness.start_worker(TURNS_HOOKS=HOOKS, TEST_SLOW_SUMMARY="30")
    conversation = harness.conv("compact-crash")
    store = await harness.store()
    prior = prior_transcript(20_000)
    await store.add_messages(conversation, prior)
    model = harness.script(
        [
            {
                "text": "answered after compaction",
                "error": {**TOO_LONG, "if_input_tokens_over": 5_000},
            }
        ]
    )
    request = await harness.turns.submit(conversation, "and now?", model=model)
    await wait_until(lambda: any(c.get("pid") == first.proc.pid for c in compactions(harness)))
    first.kill()
    harness.start_worker(TURNS_HOOKS=HOOKS)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 90)
    assert result.status == "completed" and result.text == "answered after compaction"
    messages = await store.messages(conversation)
    assert len([m for m in messages if "compaction" in m.metadata]) == 1
    assert len(messages) == len(prior) + 3
    assert [m.text for m in messages].count("and now?") == 1
