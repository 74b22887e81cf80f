"""A long conversation continues-as-new and carries its state across."""

from __future__ import annotations

import asyncio

from tests.support.harness import Harness


async def test_conversation_continues_as_new_and_keeps_state(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("long")
    model = harness.script([{"text": "ok {user}"}])
    results = [await harness.send(conversation, f"m{i}", model=model) for i in range(6)]
    assert [r.turn_number for r in results] == [1, 2, 3, 4, 5, 6]
    assert all(r.status == "completed" for r in results)
    # a burst of queued requests and a waiting update across the hand-over
    queued = [await harness.turns.submit(conversation, f"q{i}", model=model) for i in range(3)]
    last = await harness.send(conversation, "last", model=model)
    done = await asyncio.gather(*(harness.turns.wait(conversation, r) for r in queued))
    assert [d.turn_number for d in done] == [7, 8, 9] and last.turn_number == 10

    runs = [w async for w in harness.client.list_workflows(f'WorkflowId="{conversation}"')]
    assert len(runs) >= 2, "the conversation handed over to a new run"
    state = await harness.turns.state(conversation)
    assert state.turn_count == 10
    assert state.last_result is not None and state.last_result.text == "ok last"
    messages = await (await harness.store()).messages(conversation)
    assert len(messages) == 20
    # the continuation still knows the last model
    request = await harness.turns.continue_last_turn(conversation)
    cont = await harness.turns.wait(conversation, request)
    assert cont.status == "completed" and cont.turn_number == 11
