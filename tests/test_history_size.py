"""History grows with the turn, not with the conversation: activities carry ids, the
transcript lives in the store (README.md, "History stays small")."""

from __future__ import annotations

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
