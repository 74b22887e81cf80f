"""2 · History per model step versus conversation size.

The store is seeded directly with a prior transcript of about 1K, 20K, 100K and 200K tokens,
then a one-step turn runs on it. In the turn's history, one model step is the
``model_step`` activity's Scheduled, Started and Completed events; we count their events
and bytes (``ByteSize()`` of each event, as stored), and the whole turn's history besides.
"""

from __future__ import annotations

import uuid
from typing import Any

from bench.common import Bench, Row, activity_cost, kb, median, prior_transcript_texts, script
from durable_turns.client import TurnsClient
from durable_turns.messages import Message, TextPart

SIZES = (1_000, 20_000, 100_000, 200_000)
TARGET = 1.2


def prior_messages(tokens: int) -> list[Message]:
    return [
        Message(id=f"prior-{i}", role=role, parts=[TextPart(text=text)])  # type: ignore[arg-type]
        for i, (role, text) in enumerate(prior_transcript_texts(tokens))
    ]


async def measure(b: Bench, tokens: int, model: str) -> dict[str, Any]:
    conversation = f"history-{tokens}-{uuid.uuid4().hex[:6]}"
    await b.store.add_messages(conversation, prior_messages(tokens))
    result = await TurnsClient(b.client, b.engine_queue).send(conversation, "hello", model=model)
    assert result.status == "completed", result
    history = await b.client.get_workflow_handle(result.workflow_id).fetch_history()
    cost = activity_cost(history, lambda name: name == "model_step")
    return {
        "input_tokens": result.usage.input_tokens,
        "step_events": cost.events,
        "step_bytes": cost.bytes,
        "turn_events": cost.total_events,
        "turn_bytes": cost.total_bytes,
    }


async def run(b: Bench) -> tuple[list[Row], dict[str, Any]]:
    model = script(b.tmp, "history", [{"text": "Noted."}])
    repeats = b.n(3, 1)
    raw: dict[str, Any] = {
        str(t): [await measure(b, t, model) for _ in range(repeats)] for t in SIZES
    }

    def med(tokens: int, key: str) -> float:
        return median(r[key] for r in raw[str(tokens)])

    rows = []
    base = med(SIZES[0], "step_bytes")
    for tokens in SIZES:
        ratio = med(tokens, "step_bytes") / base
        last = tokens == SIZES[-1]
        rows.append(
            Row(
                "2",
                f"history per model step, {tokens // 1000}K-token conversation",
                f"{med(tokens, 'step_events'):.0f} events, {med(tokens, 'step_bytes'):,.0f} B",
                f"1K: {base:,.0f} B; whole turn {kb(med(tokens, 'turn_bytes'))}"
                f" in {med(tokens, 'turn_events'):.0f} events",
                ratio,
                f"≤ {TARGET}× 1K" if last else "",
                ("met" if ratio <= TARGET else "MISSED") if last else "",
                note=(
                    f"the model saw {med(tokens, 'input_tokens'):,.0f} input tokens (demo count);"
                    f" {repeats} turn(s) per size"
                )
                if last
                else "",
            )
        )
    return rows, raw
