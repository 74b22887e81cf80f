"""Stream accumulation: parts come out in order, whatever way the deltas arrive."""

from __future__ import annotations

from durable_turns.activities.streaming import StepSnapshot, accumulate
from durable_turns.messages import (
    ReasoningDelta,
    ReasoningEnd,
    ReasoningPart,
    TextDelta,
    TextPart,
    ToolCallChunk,
    ToolCallPart,
)


def fold(*chunks: object) -> StepSnapshot:
    snap = StepSnapshot()
    for chunk in chunks:
        accumulate(snap, chunk)  # type: ignore[arg-type]
    return snap


def test_text_tool_text_gives_three_parts() -> None:
    snap = fold(
        TextDelta(text="Let "),
        TextDelta(text="me look."),
        ToolCallChunk(tool_call_id="c1", tool_name="get_weather", input={"city": "Oslo"}),
        TextDelta(text="Done"),
        TextDelta(text="."),
    )
    parts = snap.parts
    assert [type(p) for p in parts] == [TextPart, ToolCallPart, TextPart]
    assert (parts[0].text, parts[2].text) == ("Let me look.", "Done.")  # type: ignore[union-attr]
    assert snap.text == "Let me look.Done." and snap.chunks == 5


def test_reading_parts_mid_stream_then_continuing() -> None:
    snap = fold(TextDelta(text="a"), TextDelta(text="b"))
    assert snap.text == "ab"
    accumulate(snap, TextDelta(text="c"))
    assert snap.parts == [TextPart(text="abc")]


def test_reasoning_blocks_stay_apart_and_keep_signatures() -> None:
    snap = fold(
        ReasoningDelta(text="think "),
        ReasoningDelta(text="hard"),
        ReasoningDelta(signature="sig"),
        ReasoningEnd(),
        ReasoningDelta(redacted_data="xyz"),
        ReasoningEnd(),
        TextDelta(text="answer"),
    )
    first, second, text = snap.parts
    assert (
        isinstance(first, ReasoningPart) and first.text == "think hard" and first.signature == "sig"
    )
    assert isinstance(second, ReasoningPart) and second.redacted_data == "xyz" and second.text == ""
    assert text == TextPart(text="answer")


def test_a_long_step_accumulates_every_piece() -> None:
    snap = fold(*(TextDelta(text=f"{i} ") for i in range(50_000)))
    assert snap.text.split() == [str(i) for i in range(50_000)]
