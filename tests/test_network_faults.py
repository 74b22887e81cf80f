"""Issue 25, item 5: network faults between the parts, at the default settings.

A fault-injecting proxy (``testkit/faultproxy.py``) sits between the worker and one
part: the Temporal server, PostgreSQL (the transcript) or Redis (the live chunk stream). Mid
turn, the link is reset, slowed, cut one way and blackholed for 30 s. Every turn completes
with its whole reply; the transcript has the user's message once and one reply; the live
stream a reader sees is the reply, whole and once; and the same worker process, never
restarted, answers the next turn.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator

import pytest

from durable_turns.contract import TurnResult
from durable_turns.messages import Message
from durable_turns.streams import CHUNK, ChunkPublisher, open_stream_backend
from testkit.faultproxy import FaultProxy
from tests.support.harness import Harness
from tests.support.probes import stored_messages, wait_until
from tests.test_live_stream import text_of
from tests.test_store import PG_URL

BLACKHOLE_S = 30
WORDS = 30
REDIS = os.environ.get("TURNS_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"


def _two_steps(harness: Harness) -> tuple[str, str]:
    """A 2-step turn that streams for about 2 s a step, with a tool between: its model id and
    the reply's full text."""
    first = " ".join(f"w{i}" for i in range(WORDS))
    second = " ".join(f"v{i}" for i in range(WORDS))
    model = harness.script(
        [
            {
                "text": first,
                "delay_ms": 60,
                "tool_calls": [{"name": "add", "input": {"a": 1, "b": 2}}],
            },
            {"text": second, "delay_ms": 60},
        ]
    )
    return model, f"{first}\n\n{second}"


async def _streaming(harness: Harness, conversation: str, step: int) -> bool:
    try:
        handle = harness.client.get_workflow_handle(f"{conversation}/turn-1")
        state = await handle.query("state")
    except Exception:
        return False
    return str(state.get("status")) == f"model step {step}"


def _check_transcript(messages: list[Message], text: str) -> None:
    """The user's message once, then the reply's messages once each, ending in its text (the
    worker's next turn, "again", left out)."""
    messages = messages[: next(i for i, m in enumerate(messages) if m.text == "again")]
    assert [m.role for m in messages][:1] == ["user"] and messages[0].text == "go"
    assert sum(1 for m in messages if m.role == "user") == 1
    ids = [m.id for m in messages]
    assert len(ids) == len(set(ids)), ids
    replies = [m for m in messages if m.role == "assistant"]
    assert "".join(m.text for m in replies).replace(" ", "").replace("\n", "") == text.replace(
        " ", ""
    ).replace("\n", "")


async def _check_stream(url: str, result: TurnResult, text: str) -> None:
    backend = open_stream_backend(url)
    await backend.open()
    try:
        events = await backend.read(result.workflow_id)
    finally:
        await backend.close()
    assert [e.offset for e in events] == list(range(len(events)))  # no gap, no repeat
    shown = [(e.type if e.type != "chunk" else e.data["type"], e.step, e.attempt) for e in events]
    assert text_of(events) == text, " ".join(map(str, [x for x in shown if x[0] != "text-delta"]))
    assert events[-1].type == "turn-finish" and events[-1].data["status"] == "completed"


async def _the_turn_survives(
    harness: Harness, proxy: FaultProxy, faults: list[tuple[str, float]], **worker_env: str
) -> TurnResult:
    """Start a worker with ``worker_env``, run a turn, apply each ``(fault, seconds)`` in
    order while it runs (the first once step 0 streams), heal, and check its result and the
    worker's next turn."""
    worker = await asyncio.to_thread(harness.start_worker, **worker_env)
    conversation = harness.conv(f"net-{uuid.uuid4().hex[:6]}")
    model, text = _two_steps(harness)
    request = await harness.turns.submit(conversation, "go", model=model)
    await wait_until(lambda: _streaming(harness, conversation, 0), 30)
    await asyncio.sleep(0.5)
    for fault, seconds in faults:
        if fault == "reset":
            proxy.reset()
        elif fault == "blackhole":
            proxy.blackhole()
        elif fault.startswith("partition:"):
            proxy.partition(fault.split(":", 1)[1])
        elif fault == "slow":
            proxy.slow(latency_s=0.2, bytes_per_s=16 * 1024)
        await asyncio.sleep(seconds)
        proxy.heal()
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 120)
    assert result.status == "completed", result.error
    assert result.steps == 2
    assert result.text == text
    assert proxy.stats.connections >= 1 and proxy.stats.bytes["from_target"] > 0
    again = await asyncio.wait_for(harness.send(conversation, "again", model="demo:echo"), 60)
    assert again.status == "completed" and again.text == "You said: again"
    assert worker.proc.poll() is None, "the worker had to restart"
    return result


@pytest.fixture
def temporal_proxy(harness: Harness) -> Iterator[FaultProxy]:
    host, port = harness.address.rsplit(":", 1)
    with FaultProxy((host, int(port))) as proxy:
        yield proxy


async def test_the_temporal_link_reset_slowed_and_cut_one_way_mid_turn(
    harness: Harness, temporal_proxy: FaultProxy
) -> None:
    result = await _the_turn_survives(
        harness,
        temporal_proxy,
        [
            ("reset", 1.0),
            ("slow", 3.0),
            ("partition:from_target", 5.0),
            ("reset", 0.5),
            ("partition:to_target", 5.0),
        ],
        TEMPORAL_ADDRESS=temporal_proxy.address,
    )
    assert temporal_proxy.stats.resets >= 2
    _check_transcript(await stored_messages(harness.store_url, result.conversation_id), result.text)


async def test_a_30_s_blackhole_between_the_worker_and_temporal(
    harness: Harness, temporal_proxy: FaultProxy
) -> None:
    result = await _the_turn_survives(
        harness,
        temporal_proxy,
        [("blackhole", BLACKHOLE_S)],
        TEMPORAL_ADDRESS=temporal_proxy.address,
    )
    _check_transcript(await stored_messages(harness.store_url, result.conversation_id), result.text)


@pytest.fixture
def postgres_url() -> Iterator[tuple[FaultProxy, str, str]]:
    """A fresh schema, and its URL through a proxy and direct."""
    schema = f"turns_test_{uuid.uuid4().hex[:12]}"
    with FaultProxy(("127.0.0.1", 5432)) as proxy:
        base = PG_URL.rsplit("/", 1)[1].split("?")[0]
        via = f"postgresql://postgres@{proxy.address}/{base}?schema={schema}"
        direct = f"{PG_URL.split('?')[0]}?schema={schema}"
        yield proxy, via, direct


async def test_the_postgres_link_reset_slowed_and_blackholed_mid_turn(
    harness: Harness, postgres_url: tuple[FaultProxy, str, str]
) -> None:
    proxy, via, direct = postgres_url
    result = await _the_turn_survives(
        harness,
        proxy,
        [("reset", 1.0), ("slow", 2.0), ("blackhole", BLACKHOLE_S)],
        TURNS_STORE_URL=via,
    )
    _check_transcript(await stored_messages(direct, result.conversation_id), result.text)


async def test_the_redis_link_reset_and_blackholed_mid_turn(harness: Harness) -> None:
    db = REDIS.rsplit("/", 1)[1]
    host_port = REDIS.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    with FaultProxy((host, int(port))) as proxy:
        via = f"redis://{proxy.address}/{db}"
        result = await _the_turn_survives(
            harness,
            proxy,
            [("reset", 1.0), ("slow", 2.0), ("blackhole", BLACKHOLE_S)],
            TURNS_CHUNK_STREAM_URL=via,
        )
    await _check_stream(REDIS, result, result.text)
    _check_transcript(await stored_messages(harness.store_url, result.conversation_id), result.text)


async def test_a_redis_follower_pauses_and_resumes_through_a_reset_and_a_blackhole() -> None:
    """A reader following a turn through a broken link: its read fails (a reset, then a
    blackhole longer than a command's bound) and is retried from its offset; it ends with
    every event once, in order."""
    host_port = REDIS.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    prefix = f"test:net:{uuid.uuid4().hex}:"
    db = REDIS.rsplit("/", 1)[1]
    writer = open_stream_backend(f"{REDIS}?prefix={prefix}")
    assert writer is not None
    await writer.open()
    try:
        with FaultProxy((host, int(port))) as proxy:
            reader = open_stream_backend(f"redis://{proxy.address}/{db}?prefix={prefix}")
            assert reader is not None
            await reader.open()
            sid = "c/turn-1"

            async def follow() -> list[int]:
                return [e.data["i"] async for e in reader.follow(sid) if e.type == "chunk"]

            task = asyncio.create_task(follow())
            pub = ChunkPublisher(writer, sid)
            for i in range(300):
                pub.publish(CHUNK, {"i": i})
                await asyncio.sleep(0.01)
                if i == 100:
                    proxy.reset()
                elif i == 200:
                    proxy.blackhole()
            await pub.flush()
            await asyncio.sleep(7)  # past a read's bound (5 s + block_ms): it fails, retries
            proxy.heal()
            await pub.turn_finish("completed")
            await pub.aclose()
            assert await asyncio.wait_for(task, 30) == list(range(300))
            await reader.close()
    finally:
        await writer.delete("c/turn-1")
        await writer.close()
