"""Regenerate: a turn answers the same user message again; the old reply is kept, superseded.

Real dev server, real worker processes. The demo script echoes how many messages reached the
model (``{request.message_count}``), so each reply says what its context held.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from temporalio.client import WorkflowUpdateFailedError

from durable_turns.store.base import SUPERSEDED_BY
from tests.support.harness import Harness
from tests.support.probes import wait_until

HOOKS = {
    "TURNS_HOOKS": "tests.support.hooks:RecordingHooks",
    "TURNS_TOOLS": "tests.support.tools,tests.support.hooks",
}
SLOW = "tests.support.slow_hooks:SlowHooks"
COUNTING = [{"text": "{user} · {request.message_count} in"}]
"""Every turn one step: the user's text and the size of the context the model got."""


def _ids(messages: list) -> list[str]:  # type: ignore[type-arg]
    return [m.id for m in messages]


async def test_regenerate_the_last_reply(harness: Harness) -> None:
    harness.start_worker(**HOOKS)
    conv = harness.conv("regen")
    model = harness.script(COUNTING)
    await harness.send(conv, "one", model=model)
    second = await harness.send(conv, "two", model=model)
    assert second.text == "two · 3 in"
    old = f"{conv}/turn-2/assistant"
    assert second.message_id == old

    result = await harness.turns.regenerate(conv, request_id="regen-1")
    assert result.status == "completed", result.error
    # the same user message answered again, without the old reply in the context
    assert (result.turn_number, result.text) == (3, "two · 3 in")
    assert result.message_id == f"{conv}/turn-3/assistant"

    store = await harness.store()
    current = await store.messages(conv)
    assert len(current) == 4 and old not in _ids(current)
    assert _ids(current)[1::2] == [f"{conv}/turn-1/assistant", result.message_id]
    everything = await store.messages(conv, superseded=True)
    marked = {m.id: m.metadata.get(SUPERSEDED_BY) for m in everything}
    assert marked[old] == f"{conv}/turn-3" and list(marked.values()).count(None) == 4
    [kept] = [m for m in everything if m.id == old]
    assert kept.text == "two · 3 in"  # kept as it was
    assert current[-1].metadata["regenerates"] == old

    # the same request id again (update or signal): the same result, no second regeneration
    again = await harness.turns.regenerate(conv, request_id="regen-1")
    assert again == result
    await harness.turns._signal_with_start(
        conv, "submitMessages", {"regenerate": "last", "request_id": "regen-1"}
    )
    state = await harness.turns.state(conv)
    [record] = [r for r in state.recent if r.request_id == "regen-1"]
    assert record.kind == "regenerate" and record.status == "completed"

    # the next turn's context (model and hooks) leaves the superseded reply out
    third = await harness.send(conv, "three", model=model)
    assert (third.turn_number, third.text) == (4, "three · 5 in")
    before_turn = [c for c in harness.hook_calls() if c["hook"] == "before_turn"]
    assert [c["message_count"] for c in before_turn] == [1, 3, 3, 5]
    assert len(await store.messages(conv)) == 6
    assert len(await store.messages(conv, superseded=True)) == 7


async def test_a_worker_killed_after_marking_leaves_one_regeneration(harness: Harness) -> None:
    """begin_turn marks, then its worker dies in before_turn: the next worker runs begin_turn
    again, finds the marks by the turn's key and builds the same context (the old reply is
    no longer in the transcript it reads, so without the key it would find nothing)."""
    conv = harness.conv("regen-crash")
    model = harness.script(COUNTING)
    harness.start_worker()
    await harness.send(conv, "one", model=model)
    await harness.send(conv, "two", model=model)
    harness.workers[0].stop()

    slow = harness.start_worker(TURNS_HOOKS=SLOW, TEST_SLOW_HOOK="before_turn:60")
    record = await harness.turns.start_regenerate(conv, request_id="regen-crash")
    store = await harness.store()
    await wait_until(lambda: any(c.get("pid") == slow.proc.pid for c in harness.hook_calls()))
    marked = [m for m in await store.messages(conv, superseded=True) if SUPERSEDED_BY in m.metadata]
    assert [m.id for m in marked] == [f"{conv}/turn-2/assistant"]  # marked before before_turn
    slow.kill()
    harness.start_worker(TURNS_HOOKS=SLOW)
    result = await asyncio.wait_for(harness.turns.result(conv, record), 90)
    assert result.status == "completed", result.error
    assert (result.turn_number, result.text) == (3, "two · 3 in")
    everything = await store.messages(conv, superseded=True)
    assert [m.metadata.get(SUPERSEDED_BY) for m in everything] == [
        None,
        None,
        None,
        f"{conv}/turn-3",
        None,
    ]
    assert len({c["pid"] for c in harness.hook_calls() if c["hook"] == "before_turn"}) == 2


async def test_a_regenerate_naming_nothing_to_regenerate_is_a_typed_error(
    harness: Harness,
) -> None:
    harness.start_worker()
    conv = harness.conv("regen-bad")
    model = harness.script(COUNTING)

    empty = await harness.turns.regenerate(conv)  # a conversation with no messages
    assert empty.status == "error" and empty.error is not None
    assert empty.error.type == "NothingToRegenerate"

    first = await harness.send(conv, "one", model=model)
    store = await harness.store()
    before = await store.messages(conv, superseded=True)
    user_id = before[0].id
    for target, words in (
        (f"{conv}/turn-9/assistant", "no message"),
        (user_id, "is a user message"),
    ):
        result = await harness.turns.regenerate(conv, target)
        assert result.status == "error" and result.error is not None, result
        assert result.error.type == "NothingToRegenerate", result.error
        assert words in result.error.message
    assert await store.messages(conv, superseded=True) == before  # nothing changed

    # malformed requests are rejected before they queue anything
    handle = harness.client.get_workflow_handle(conv)
    for bad in (
        {"regenerate": "last", "messages": [{"role": "user", "content": "hi"}]},
        {"regenerate": ""},
        {"regenerate": "a\x00b"},
        {"messages": []},
    ):
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await handle.execute_update("sendMessage", bad)
        assert "malformed request" in str(info.value.cause)

    # the conversation goes on, and a regeneration still works
    nxt = await harness.send(conv, "two", model=model)
    assert nxt.status == "completed" and nxt.text == "two · 3 in"
    regen = await harness.turns.regenerate(conv, first.message_id or "")
    assert regen.status == "completed" and regen.text == "one · 1 in"
    assert _ids(await store.messages(conv)) == [user_id, regen.message_id]


async def test_regenerate_after_a_continuation_chain_supersedes_all_of_it(
    harness: Harness,
) -> None:
    harness.start_worker()
    conv = harness.conv("regen-chain")
    model = harness.script(
        [
            {"text": "start · {request.message_count} in"},
            {"text": "more · {request.message_count} in"},
        ]
    )
    first = await harness.send(conv, "go", model=model)
    assert first.text == "start · 1 in"
    request = await harness.turns.continue_last_turn(conv)
    continued = await harness.turns.wait(conv, request)
    assert continued.status == "completed" and continued.text == "more · 3 in"

    # the regeneration runs through `turns regenerate`, which names the continuation
    out = await asyncio.to_thread(
        _turns, harness, "regenerate", conv, "--message", f"{conv}/turn-2/assistant"
    )
    assert out.returncode == 0, out.stderr
    assert "start · 1 in" in out.stdout  # the user message alone reached the model

    store = await harness.store()
    everything = await store.messages(conv, superseded=True)
    marks = [m.metadata.get(SUPERSEDED_BY) for m in everything]
    assert marks == [None, f"{conv}/turn-3", f"{conv}/turn-3", None]
    assert _ids(everything)[1:] == [
        f"{conv}/turn-1/assistant",
        f"{conv}/turn-2/assistant",
        f"{conv}/turn-3/assistant",
    ]
    assert len(await store.messages(conv)) == 2

    listing = await asyncio.to_thread(_turns, harness, "transcript", conv)
    assert listing.returncode == 0, listing.stderr
    assert f"({conv}/turn-1/assistant) · superseded by {conv}/turn-3" in listing.stdout
    assert f"({conv}/turn-3/assistant)\n" in listing.stdout

    after = await harness.send(conv, "again", model=model)
    assert after.text == "start · 3 in"


def _turns(harness: Harness, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))},
        "TEMPORAL_ADDRESS": harness.address,
        "TURNS_TASK_QUEUE": harness.task_queue,
        "TURNS_STORE_URL": harness.store_url,
        "TURNS_DATA_DIR": str(harness.tmp / "data"),
    }
    return subprocess.run(
        [sys.executable, "-m", "durable_turns.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
