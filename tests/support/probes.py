"""Waiting on and looking into a running system: conditions, turn state, ports, streams."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from durable_turns.contract import TurnResult
from durable_turns.messages import Message
from durable_turns.store import open_store
from durable_turns.streams import open_stream_backend
from durable_turns.streams.base import ChunkStreamBackend
from tests.support.harness import Harness


async def wait_until(predicate: Callable[[], object], within: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await _check(predicate):
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.05)


async def _check(predicate: Callable[[], object]) -> bool:
    value = predicate()
    if asyncio.iscoroutine(value):
        value = await value
    return bool(value)


async def recorded_result(harness: Harness, conversation: str, turn: int) -> TurnResult:
    """Turn ``turn``'s result as its conversation recorded it. A client's wait ends on the
    turn workflow's own result; the conversation records it a workflow task later."""

    async def recorded() -> TurnResult | None:
        last = (await harness.turns.state(conversation)).last_result
        return last if last is not None and last.turn_number == turn else None

    await wait_until(recorded, 10)
    last = await recorded()
    assert last is not None
    return last


async def turn_status(harness: Harness, conversation: str) -> str:
    try:
        handle = harness.client.get_workflow_handle(f"{conversation}/turn-1")
        return str((await handle.query("state"))["status"])
    except Exception:
        return ""


async def pending_calls(harness: Harness, conversation: str, count: int = 1) -> list[dict]:
    calls: list[dict] = []

    async def ready() -> bool:
        nonlocal calls
        try:
            calls = await harness.turns.pending_tool_calls(conversation)
        except Exception:
            return False
        return len(calls) == count

    await wait_until(ready)
    return calls


async def turns_done(harness: Harness, conversation: str, count: int) -> bool:
    state = await harness.turns.state(conversation)
    return state.running is None and not state.queue and state.turn_count >= count


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def chunk_backend(harness: Harness, url: str | None = None) -> ChunkStreamBackend:
    streams = open_stream_backend(url or f"sqlite:///{harness.tmp / 'data' / 'chunks.db'}")
    assert streams is not None
    await streams.open()
    return streams


async def stored_messages(url: str, conversation: str) -> list[Message]:
    """A conversation's transcript, read with a store of its own at ``url``."""
    store = open_store(url)
    await store.open()
    try:
        return await store.messages(conversation)
    finally:
        await store.close()
