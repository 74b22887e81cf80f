"""Issue 12, item 2: nothing started elsewhere can pre-fill, overwrite or answer a
conversation's turn. A turn's stored steps belong to the workflow run that made them.

Old code: a directly started TurnWorkflow under the victim's next turn stored its step 0
under ``<victim>/turn-2``; the victim's real turn 2 found that step and returned it without
asking the model (the victim read the squatter's reply), and a squatter still running could
write its reply over the victim's.
"""

from __future__ import annotations

import asyncio
import uuid

from durable_turns.contract import TurnInput, TurnResult
from durable_turns.messages import user_message
from tests.support.harness import Harness
from tests.support.probes import wait_until


def _squat(model: str, conversation: str, turn_number: int) -> TurnInput:
    return TurnInput(
        conversation_id=conversation,
        turn_number=turn_number,
        request_id=f"squat-{uuid.uuid4().hex[:6]}",
        new_messages=[user_message("planted question")],
        model=model,
    )


async def _transcript(harness: Harness, conversation: str) -> list[str]:
    return [m.text for m in await (await harness.store()).messages(conversation)]


async def test_a_directly_started_turn_cannot_prefill_the_next_turn(harness: Harness) -> None:
    harness.start_worker()
    victim = harness.conv("victim")
    assert (await harness.send(victim, "one", model="demo:echo")).text == "You said: one"
    squatter = harness.script([{"text": "SQUATTED reply"}])
    done = await harness.client.execute_workflow(
        "TurnWorkflow",
        _squat(squatter, victim, 2),
        id=f"{victim}/turn-2",  # the victim's next turn id
        task_queue=harness.task_queue,
        result_type=TurnResult,
    )
    assert done.status == "completed" and done.text == "SQUATTED reply"  # it ran, unowned

    result = await asyncio.wait_for(harness.send(victim, "two", model="demo:echo"), 30)
    assert result.turn_number == 2 and result.status == "completed"
    assert result.text == "You said: two", "the model was asked, not the squatter's step reused"
    assert await _transcript(harness, victim) == [
        "one",
        "You said: one",
        "two",
        "You said: two",
    ]
    assert (await harness.send(victim, "three", model="demo:echo")).turn_number == 3


async def test_a_running_squatter_cannot_answer_or_overwrite_the_turn(harness: Harness) -> None:
    harness.start_worker()
    victim = harness.conv("victim-live")
    assert (await harness.send(victim, "one", model="demo:echo")).status == "completed"
    slow = harness.script(
        [
            {"text": "Working.", "tool_calls": [{"name": "slow", "input": {"seconds": 4}}]},
            {"text": "SQUATTED reply"},
        ]
    )
    squatter = await harness.client.start_workflow(
        "TurnWorkflow",
        _squat(slow, victim, 2),
        id=f"squat-{uuid.uuid4().hex[:8]}",
        task_queue=harness.task_queue,
        result_type=TurnResult,
    )
    await wait_until(lambda: any(r.get("phase") == "start" for r in harness.tool_runs()), 20)

    result = await asyncio.wait_for(harness.send(victim, "two", model="demo:echo"), 30)
    assert result.text == "You said: two"

    # the squatter's tool ends after the conversation took the turn: it writes nothing
    squatted = await asyncio.wait_for(squatter.result(), 30)
    assert squatted.status == "error" and squatted.error is not None
    assert squatted.error.type == "TurnTakenOver"
    transcript = await _transcript(harness, victim)
    assert transcript == ["one", "You said: one", "two", "You said: two"]
    store = await harness.store()
    [step] = await store.steps(f"{victim}/turn-2", 0)
    assert step.parts[0].text == "You said: two"  # type: ignore[union-attr]
    assert await store.tool_results(f"{victim}/turn-2") == {}

    # and a turn the conversation ran is never taken by a run started elsewhere
    late = await harness.client.execute_workflow(
        "TurnWorkflow",
        _squat(harness.script([{"text": "SQUATTED again"}]), victim, 1),
        id=f"squat-{uuid.uuid4().hex[:8]}",
        task_queue=harness.task_queue,
        result_type=TurnResult,
    )
    assert late.status == "error" and late.error is not None
    assert late.error.type == "TurnTakenOver"
    assert await _transcript(harness, victim) == transcript
