"""The rest of Think's hook contract (issue 16): every context says which turn it is in,
``on_step_finish`` gets the full step record, and ``on_chunk`` can tell a retried step."""

from __future__ import annotations

from tests.support.harness import Harness
from tests.support.hooks import HOOK_TOOLS
from tests.support.probes import wait_until

HOOKS = "tests.support.contract_hooks:ContractHooks"


def start(harness: Harness, **env: str) -> None:
    harness.start_worker(TURNS_HOOKS=HOOKS, TURNS_TOOLS=HOOK_TOOLS, **env)


async def test_every_hook_context_carries_the_turn(harness: Harness) -> None:
    start(harness)
    conversation = harness.conv("ids")
    script = harness.script(
        [
            {"text": "noting", "tool_calls": [{"name": "note", "input": {"text": "x"}}]},
            {"text": "done"},
        ]
    )
    ok = await harness.send(conversation, "hi", model=script, request_id="req-ok")
    assert ok.status == "completed", ok.error
    broken = harness.script([{"text": "", "error": {"message": "bad request", "status": 400}}])
    failed = await harness.send(conversation, "again", model=broken, request_id="req-fail")
    assert failed.status == "error"
    await wait_until(
        lambda: len([c for c in harness.hook_calls() if c["hook"] == "on_chat_response"]) == 2
    )
    hooks = {
        "before_turn",
        "before_step",
        "before_tool_call",
        "after_tool_call",
        "on_step_finish",
        "on_chunk",
        "on_chat_response",
        "on_chat_error",
        "classify_chat_error",
    }
    calls = [c for c in harness.hook_calls() if c["hook"] in hooks]
    assert {c["hook"] for c in calls} == hooks
    for call in calls:
        turn = 1 if call["request_id"] == "req-ok" else 2
        assert call["request_id"] in ("req-ok", "req-fail"), call
        assert call["conversation_id"] == conversation, call
        assert call["turn_number"] == turn, call
    step1 = next(c for c in calls if c["hook"] == "before_step" and c["steps"])
    assert step1["steps"] == [[conversation, 1]]


async def test_on_chunk_tells_a_retried_step_by_its_attempt(harness: Harness) -> None:
    start(harness)
    step = {
        "text": "one two three four",
        "error": {"message": "overloaded", "status": 529, "kind": "transient", "after_chunks": 2},
        "attempts": 1,
    }
    result = await harness.send(harness.conv("retry"), "hi", model=harness.script([step]))
    assert result.status == "completed" and result.text == "one two three four"
    chunks = [
        (c["attempt"], c["text"])
        for c in harness.hook_calls()
        if c["hook"] == "on_chunk" and c["type"] == "text-delta"
    ]
    assert chunks == [
        (1, "one "),
        (1, "two "),
        (2, "one "),
        (2, "two "),
        (2, "three "),
        (2, "four"),
    ], chunks
    # what a hook keeps, dropping earlier attempts of a step as the live stream's reset does
    kept: dict[int, list[str]] = {}
    latest = 0
    for attempt, text in chunks:
        if attempt > latest:
            kept, latest = {}, attempt
        kept.setdefault(0, []).append(text)
    assert "".join(kept[0]) == result.text


async def test_on_step_finish_gets_the_full_step_record(harness: Harness) -> None:
    start(harness)
    script = [
        {
            "text": "Looking.",
            "sources": [{"url": "https://example.org/a", "title": "A"}],
            "tool_calls": [{"name": "note", "input": {"text": "x"}}],
        },
        {"text": "Done."},
    ]
    model = harness.script(script)
    result = await harness.send(harness.conv("record"), "hi", model=model)
    assert result.status == "completed", result.error
    steps = {c["step"]: c for c in harness.hook_calls() if c["hook"] == "on_step_finish"}
    first, second = steps[0], steps[1]
    assert [s["url"] for s in first["sources"]] == ["https://example.org/a"]
    assert first["sources"][0]["title"] == "A"
    assert second["sources"] == [] and first["files"] == []
    request = first["request"]
    assert request["model"] == model and request["attempt"] == 1
    assert "note" in request["tools"] and request["message_count"] == 1
    assert second["request"]["message_count"] == 2  # the user's message, then step 0's output
