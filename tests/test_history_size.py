"""History grows with the turn, not with the conversation: activities carry ids, the
transcript lives in the store (README.md, "History stays small")."""

from __future__ import annotations

from durable_turns.contract import MAX_METADATA_BYTES
from tests.support.harness import Harness
from tests.support.history import model_step_bytes, prior_transcript


async def test_model_step_history_is_flat_in_conversation_size(harness: Harness) -> None:
    harness.start_worker()
    store = await harness.store()
    sizes = {}
    for tokens in (1_000, 100_000):
        conversation = harness.conv(f"hist-{tokens}")
        await store.add_messages(conversation, prior_transcript(tokens))
        result = await harness.send(conversation, "hello", model="demo:echo")
        assert result.status == "completed"
        assert result.usage.input_tokens >= tokens * 0.9  # the model really saw the context
        sizes[tokens] = await model_step_bytes(harness.client, result.workflow_id)
    (small_step, small_turn), (big_step, big_turn) = sizes[1_000], sizes[100_000]
    assert small_step > 0
    assert big_step <= small_step * 1.2, sizes
    assert big_turn <= small_turn * 1.2, sizes
    assert big_turn < 20_000, "a one-step turn's whole history stays a few KB"


async def test_metadata_costs_a_turn_a_constant_not_a_model_step(harness: Harness) -> None:
    """16 KiB of metadata travels in the turn's input, its begin_turn input and its result
    (a few events), never in a model step's input: every activity reads it from the turn's
    record. The turn's result comes from ``finish_turn`` or, when the last model step
    finishes the turn (``activities.last_step``), from that step's: once a turn either way."""
    harness.start_worker()
    metadata = {"pad": "m" * (MAX_METADATA_BYTES - 20)}
    sizes: dict[tuple[int, bool], tuple[int, int]] = {}
    for steps in (1, 3):  # conversation ids differ in length by one letter ("True"/"False")
        script = [
            {"tool_calls": [{"name": "add", "input": {"a": i, "b": 1}}]} for i in range(steps - 1)
        ]
        model = harness.script([*script, {"text": "done"}])
        for with_metadata in (False, True):
            conversation = harness.conv(f"hist-meta-{steps}-{with_metadata}")
            result = await harness.send(
                conversation, "go", model=model, metadata=metadata if with_metadata else None
            )
            assert result.status == "completed" and result.steps == steps
            sizes[steps, with_metadata] = await model_step_bytes(harness.client, result.workflow_id)
    in_steps = {}
    for steps in (1, 3):
        (step_plain, turn_plain), (step_meta, turn_meta) = sizes[steps, False], sizes[steps, True]
        in_steps[steps] = step_meta - step_plain  # the last step's result, or ids' letters
        assert in_steps[steps] <= MAX_METADATA_BYTES * 1.1, sizes
        extra = turn_meta - turn_plain
        assert MAX_METADATA_BYTES * 2 < extra < MAX_METADATA_BYTES * 4, (
            sizes
        )  # input, begin, result
    extra_1 = sizes[1, True][1] - sizes[1, False][1]
    extra_3 = sizes[3, True][1] - sizes[3, False][1]
    assert abs(extra_3 - extra_1) < 200, sizes  # the same whatever the steps
    assert abs(in_steps[3] - in_steps[1]) < 200, sizes  # in one step's events at most
