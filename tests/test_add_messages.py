"""``addMessages`` (Think's ``addMessages()``): messages into the transcript without a turn,
in the order of the turn queue, idempotent, the next turn's context has them."""

from __future__ import annotations

import asyncio

from durable_turns.messages import Message, TextPart
from tests.support.harness import Harness


def _note(text: str, id: str = "", role: str = "system") -> Message:
    return Message(id=id, role=role, parts=[TextPart(text=text)])  # type: ignore[arg-type]


async def test_added_messages_land_between_the_turns_around_them(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("add")
    first = await harness.turns.submit(conversation, "one", model="demo:echo", request_id="r1")
    added = await harness.turns.add_messages(
        conversation, [_note("the user upgraded to pro", "upgrade")]
    )
    second = await harness.turns.submit(conversation, "two", model="demo:echo", request_id="r2")
    for rid in (first, second):
        assert (await asyncio.wait_for(harness.turns.wait(conversation, rid), 60)).status == (
            "completed"
        )
    messages = await (await harness.store()).messages(conversation)
    assert [(m.role, m.text) for m in messages] == [
        ("user", "one"),
        ("assistant", "You said: one"),
        ("system", "the user upgraded to pro"),
        ("user", "two"),
        ("assistant", "You said: two"),
    ]
    assert messages[2].id == f"{added}/upgrade"
    state = await harness.turns.state(conversation)
    [record] = [r for r in state.recent if r.request_id == added]
    assert record.kind == "add" and record.status == "completed" and record.turn_number is None
    assert state.turn_count == 2  # no turn ran for it


async def test_the_same_note_sent_twice_is_added_once(harness: Harness) -> None:
    """Without a request id, a request whose messages all have ids gets one derived from
    them: a back office that re-sends its note after a timeout adds it once."""
    harness.start_worker()
    conversation = harness.conv("add-twice")
    note = [_note("ticket 42 closed", "ticket-42", role="user")]
    a = await harness.turns.add_messages(conversation, note)
    b = await harness.turns.add_messages(conversation, note)
    assert a == b
    result = await harness.send(conversation, "and now?", model="demo:echo")
    assert result.status == "completed"
    messages = await (await harness.store()).messages(conversation)
    assert [m.text for m in messages] == ["ticket 42 closed", "and now?", "You said: and now?"]


async def test_a_malformed_add_is_rejected_visibly_and_nothing_is_added(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("add-bad")
    handle = await harness.client.start_workflow(
        "ConversationWorkflow", id=conversation, task_queue=harness.task_queue
    )
    for bad in ({"messages": []}, {"messages": [{"role": "user"}]}, {"messages": "x"}, None):
        await handle.signal("addMessages", bad)
    result = await harness.send(conversation, "hi", model="demo:echo")
    assert result.status == "completed" and result.turn_number == 1
    state = await harness.turns.state(conversation)
    errors = [r.error.type for r in state.recent if r.status == "rejected" and r.error]
    assert errors == ["InvalidRequest"] * 4
    messages = await (await harness.store()).messages(conversation)
    assert [m.text for m in messages] == ["hi", "You said: hi"]
