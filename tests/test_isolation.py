"""User async code that blocks delays only its own turn (issue 25, item 4).

An ``async def`` tool, an ``async def`` hook, ``on_chunk`` and a stream transform that call
``time.sleep`` each hold their own user loop (``activities/isolation.py``): another
conversation's turn on the same worker completes promptly meanwhile. Real worker processes
on the real dev server, at the default settings, and again with every core kept busy by
other processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from typing import Any

import pytest
from temporalio import activity
from temporalio.testing import ActivityEnvironment
from temporalio.worker import ActivityInboundInterceptor, ActivityOutboundInterceptor

from durable_turns.activities import isolation
from durable_turns.activities.heartbeats import WORKER_PROCESS, SharedWorker
from durable_turns.config import Settings
from durable_turns.contract import SHARE_KEY
from testkit.load import busy_cores
from tests.support.harness import Harness

BLOCK_S = 10
"""How long the user code blocks."""
OTHER_TURN_S = 5
"""The other conversation's turn must finish within this (it waited BLOCK_S on old code)."""
TOOLS = "tests.support.tools,tests.support.edge_tools"
HOOKS = "tests.support.async_blocking:AsyncBlockingHooks"


def calling(tool: str, **input: Any) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": tool, "input": input}]}, {"text": "{tool_result}"}]


def blocking_turn(harness: Harness, kind: str) -> dict[str, Any]:
    """The ``send`` arguments of a turn whose user code of ``kind`` blocks."""
    if kind == "tool":
        model = harness.script(calling("block_async", seconds=BLOCK_S))
        return {"text": "go", "model": model}
    if kind == "hook":
        return {"text": "hi", "model": "demo:echo", "body": {"block": "before_turn"}}
    if kind == "on_chunk":
        return {"text": "BLOCK", "model": "demo:echo", "body": {"block": "on_chunk"}}
    assert kind == "transform"
    return {"text": "BLOCK", "model": "demo:echo", "body": {"transform": True}}


def started_blocking(harness: Harness, kind: str) -> bool:
    if kind == "tool":
        return any(r["tool"] == "block_async" for r in harness.tool_runs())
    where = "before_turn" if kind == "hook" else kind
    return any(c.get("in") == where for c in harness.hook_calls() if c["hook"] == "blocking")


async def until(check: Any, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("loaded", [False, True], ids=["defaults", "cores-loaded"])
@pytest.mark.parametrize("kind", ["tool", "hook", "on_chunk", "transform"])
async def test_blocking_async_user_code_delays_only_its_own_turn(
    harness: Harness, kind: str, loaded: bool
) -> None:
    worker = harness.start_worker(
        TURNS_TOOLS=TOOLS,
        TURNS_HOOKS=HOOKS,
        TEST_BLOCK_S=str(BLOCK_S),
    )
    load = busy_cores() if loaded else contextlib.nullcontext()
    with load:
        args = blocking_turn(harness, kind)
        text = args.pop("text")
        started = time.monotonic()
        blocked = asyncio.create_task(harness.send(harness.conv("blocked"), text, **args))
        await until(lambda: started_blocking(harness, kind))
        other_started = time.monotonic()
        other = await asyncio.wait_for(
            harness.send(harness.conv("other"), "hello", model="demo:echo"), BLOCK_S * 3
        )
        other_s = time.monotonic() - other_started
        assert other.status == "completed" and other.text == "You said: hello"
        print(f"{kind}: the other turn took {other_s:.2f}s")
        assert other_s < OTHER_TURN_S, f"the other turn took {other_s:.1f}s"
        assert not blocked.done()  # it is still blocked: the other turn did not wait for it
        result = await asyncio.wait_for(blocked, 60)
    assert result.status == "completed", result
    assert time.monotonic() - started >= BLOCK_S  # its own turn did wait
    log = worker.log_tail(20_000)
    assert "event loop blocked (user loop" in log  # named, on its own loop
    label = {"tool": "tool block_async", "hook": "hook before_turn"}.get(kind)
    label = label or {"on_chunk": "hook on_chunk", "transform": "stream transform"}[kind]
    assert f"by {label}" in log


def test_the_pool_of_user_loops_is_a_bounded_setting() -> None:
    assert Settings().user_loops == isolation.USER_LOOPS == 32
    for bad in (-1, isolation.MAX_USER_LOOPS + 1):
        with pytest.raises(ValueError, match="TURNS_USER_LOOPS must be 0"):
            Settings(user_loops=bad)
        with pytest.raises(ValueError, match="TURNS_USER_LOOPS must be 0"):
            isolation.configure(bad)


# --- the pool itself: real loops on real threads, no worker -----------------------------------

_seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


async def test_a_call_runs_on_a_user_loop_with_the_callers_context() -> None:
    here = threading.get_ident()
    _seen.set("the caller's")

    async def call() -> tuple[int, str, bool]:
        return threading.get_ident(), _seen.get(), isolation.on_user_loop()

    thread, seen, on_user_loop = await isolation.run("test call", call)
    assert thread != here and seen == "the caller's" and on_user_loop
    assert not isolation.on_user_loop()


async def test_a_blocked_loop_is_not_handed_out_again_until_its_call_ends() -> None:
    started, release = threading.Event(), threading.Event()
    blocked_on: list[int] = []

    async def blocks() -> None:
        blocked_on.append(threading.get_ident())
        started.set()
        release.wait(10)  # blocks its loop, as time.sleep would

    async def quick() -> int:
        return threading.get_ident()

    blocked = asyncio.create_task(isolation.run("test blocks", blocks))
    await asyncio.to_thread(started.wait, 10)
    blocked.cancel()  # the caller gives up at once; the call is still blocked on its loop
    with pytest.raises(asyncio.CancelledError):
        await blocked
    try:  # each of these would wait 10 s on the blocked loop
        others = [await asyncio.wait_for(isolation.run("test quick", quick), 2) for _ in range(5)]
    finally:
        release.set()
    assert blocked_on[0] not in others and threading.get_ident() not in others


async def test_cancelling_the_caller_cancels_the_call_on_its_loop() -> None:
    cancelled = threading.Event()

    async def waits() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = asyncio.create_task(isolation.run("test waits", waits))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(cancelled.wait, 5)


async def test_a_chunk_stage_sees_every_chunk_in_order_before_drain_returns() -> None:
    seen: list[int] = []
    threads: set[int] = set()

    async def observe(chunk: int) -> None:
        threads.add(threading.get_ident())
        if chunk % 100 == 0:
            await asyncio.sleep(0.001)  # the stage falls behind; pushes never wait
        seen.append(chunk)

    stage = isolation.ChunkStage(observe, "test on_chunk")
    try:
        for i in range(1000):
            await stage.push(i)
            if i % 16 == 0:
                await asyncio.sleep(0)
        await asyncio.wait_for(stage.drain(), 10)
    finally:
        stage.close()
    assert seen == list(range(1000))
    assert len(threads) == 1 and threading.get_ident() not in threads


async def test_a_chunk_stage_hands_a_steady_stream_over_in_batches_without_waiting_for_drain() -> (
    None
):
    """A chunk every 5 ms: the user loop is woken at most once per ``CHUNK_BATCH_S`` (each
    wake-up is a task of its own), and chunks reach the hook without ``drain``."""
    seen: list[int] = []
    wakes: set[int] = set()

    async def observe(chunk: int) -> None:
        wakes.add(id(asyncio.current_task()))
        seen.append(chunk)

    stage = isolation.ChunkStage(observe, "test on_chunk")
    user = stage.lease.user
    assert user is not None
    leased = user.calls
    try:
        for i in range(40):
            await stage.push(i)
            await asyncio.sleep(0.005)
        await until(lambda: len(seen) == 40, within_s=5)  # no drain: the last batch's timer
    finally:
        stage.close()
    assert seen == list(range(40))
    assert len(wakes) <= 40 // 2, f"{len(wakes)} wake-ups for 40 chunks"
    await until(lambda: user.calls == leased - 1, within_s=5)  # the loop is handed back


async def test_a_chunk_stage_closed_with_chunks_waiting_drops_them_and_hands_its_loop_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(isolation, "CHUNK_BATCH_S", 30.0)  # the second chunk's batch waits
    seen: list[int] = []

    async def observe(chunk: int) -> None:
        seen.append(chunk)

    stage = isolation.ChunkStage(observe, "test on_chunk")
    user = stage.lease.user
    assert user is not None
    leased = user.calls
    await stage.push(0)  # woken at once: the loop was never woken
    await asyncio.wait_for(stage.drain(), 10)
    await stage.push(1)  # within CHUNK_BATCH_S of the last wake-up: it waits for its batch
    assert seen == [0] and stage.timer is not None
    stage.close()  # a step cancelled mid-stream
    assert stage.timer is None
    await until(lambda: user.calls == leased - 1, within_s=5)
    await asyncio.sleep(0.2)
    assert seen == [0]


async def test_a_chunk_stage_runs_in_the_steps_activity_context() -> None:
    """``activity.heartbeat`` and ``activity.info`` in ``on_chunk`` (on its user loop) are the
    step's, at every wake-up of the stage, not only the first."""
    env = ActivityEnvironment()
    here = threading.get_ident()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details[0])
    observed: list[tuple[int, str]] = []

    async def observe(chunk: int) -> None:
        observed.append((threading.get_ident(), activity.info().activity_type))
        activity.heartbeat(chunk)

    async def step() -> None:
        stage = isolation.ChunkStage(observe, "test on_chunk")
        try:
            for i in range(3):
                await stage.push(i)
                await asyncio.wait_for(stage.drain(), 10)  # a wake-up per chunk
        finally:
            stage.close()

    await env.run(step)
    assert beats == [0, 1, 2]
    assert {kind for _, kind in observed} == {env.info.activity_type}
    assert here not in {t for t, _ in observed}, "observed on the user loop"


async def test_a_heartbeat_made_on_a_user_loop_is_sent_from_the_workers_loop() -> None:
    """The engine's activity interceptor hands a heartbeat made on another thread to the
    worker's loop, where the SDK sends it (with a task of that loop); one made there is sent
    at once. Each carries the worker's share and its count."""
    here = threading.get_ident()
    sent: list[tuple[tuple[Any, ...], int]] = []

    class Sent(ActivityOutboundInterceptor):  # what the SDK's own outbound would be given
        def heartbeat(self, *details: Any) -> None:
            sent.append((details, threading.get_ident()))

    class Given(ActivityInboundInterceptor):  # the next inbound: keeps the outbound it gets
        outbound: ActivityOutboundInterceptor | None = None

        def init(self, outbound: ActivityOutboundInterceptor) -> None:
            self.outbound = outbound

    given = Given(None)  # type: ignore[arg-type]
    SharedWorker().intercept_activity(given).init(Sent(None))  # type: ignore[arg-type]
    outbound = given.outbound
    assert outbound is not None

    async def on_user_loop() -> int:
        outbound.heartbeat("from a user loop")
        return threading.get_ident()

    user_thread = await isolation.run("test heartbeat", on_user_loop)
    outbound.heartbeat("from the worker's loop")
    await until(lambda: len(sent) == 2, within_s=5)
    assert user_thread != here
    assert {details[0] for details, _ in sent} == {"from a user loop", "from the worker's loop"}
    assert {thread for _, thread in sent} == {here}, "sent from the worker's loop"
    assert sorted(details[-1]["beats"] for details, _ in sent) == [1, 2]
    assert all(details[-1][SHARE_KEY] == WORKER_PROCESS for details, _ in sent)
