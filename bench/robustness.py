"""``python -m bench.robustness``: issue 12 at full scale (not a CI test; minutes, not seconds).

1. a burst of 10,000 malformed ``submitMessages`` signals, delivered in one activation;
2. a burst of 10,000 valid ones (past the queue bound: ``QueueFull``);
3. a steady queue of 3,000 requests, run to the end: every run's history stays far under
   Temporal's 51,200-event limit and every request completes.

Each prints what it measured and fails loudly when the conversation wedged. The scaled-down
versions run in ``tests/test_conversation_edges.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.common import ROOT, WorkerProcess, engine_env, temporal_server
from durable_turns.client import TurnsClient
from durable_turns.contract import MAX_QUEUED_REQUESTS, ConversationState

BURST = 10_000
QUEUE = 3_000


async def _signal_all(handle: WorkflowHandle[Any, Any], args: list[Any]) -> None:
    sem = asyncio.Semaphore(128)

    async def one(arg: Any) -> None:
        async with sem:
            await handle.signal("submitMessages", arg)

    await asyncio.gather(*(one(a) for a in args))


async def _wait_state(turns: TurnsClient, conv: str, ok: Any, within_s: float) -> ConversationState:
    deadline = time.monotonic() + within_s
    while True:
        state = await turns.state(conv)
        if ok(state):
            return state
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{conv}: not settled in {within_s}s: {state.model_dump_json()[:500]}"
            )
        await asyncio.sleep(0.5)


async def _history_lengths(client: Client, workflow_id: str) -> list[int]:
    lengths = []
    async for ex in client.list_workflows(f'WorkflowId="{workflow_id}"'):
        history = await client.get_workflow_handle(workflow_id, run_id=ex.run_id).fetch_history()
        lengths.append(len(history.events))
    return lengths


async def burst(client: Client, turns: TurnsClient, tmp: Path, address: str, valid: bool) -> None:
    kind = "valid" if valid else "malformed"
    task_queue = turns.task_queue
    conv = f"burst-{kind}-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow("ConversationWorkflow", id=conv, task_queue=task_queue)
    args = (
        [
            {"messages": [{"role": "user", "content": f"v{i}"}], "model": "demo:echo"}
            for i in range(BURST)
        ]
        if valid
        else [{"messages": "nope", "n": i} for i in range(BURST)]
    )
    t0 = time.monotonic()
    await _signal_all(handle, args)
    sent = time.monotonic() - t0
    worker = WorkerProcess(
        [sys.executable, str(ROOT / "worker.py")],
        engine_env(address, task_queue, tmp),
        tmp / f"worker-{kind}.log",
        "worker ready",
    )
    try:
        worker.wait_ready()
        t1 = time.monotonic()
        expected = BURST - MAX_QUEUED_REQUESTS if valid else BURST
        state = await _wait_state(
            turns,
            conv,
            lambda s: s.rejected_count >= expected and (not valid or s.turn_count >= 1),
            300,
        )
        if not valid:
            result = await asyncio.wait_for(
                turns.send(conv, "still there?", model="demo:echo"), 120
            )
            assert result.status == "completed", result
        took = time.monotonic() - t1
        print(
            f"burst of {BURST} {kind} signals: sent in {sent:.1f}s; settled in {took:.1f}s;"
            f" rejected {state.rejected_count}, queued {state.queued_count},"
            f" turns {state.turn_count}; the conversation works"
        )
    finally:
        await handle.terminate()
        worker.stop()


async def long_queue(client: Client, turns: TurnsClient, tmp: Path, address: str) -> None:
    conv = f"queue-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        "ConversationWorkflow", id=conv, task_queue=turns.task_queue
    )
    worker = WorkerProcess(
        [sys.executable, str(ROOT / "worker.py")],
        engine_env(address, turns.task_queue, tmp),
        tmp / "worker-queue.log",
        "worker ready",
    )
    try:
        worker.wait_ready()
        t0 = time.monotonic()
        sent = 0
        while sent < QUEUE:  # a steady queue: keep it near 500 deep
            state = await turns.state(conv)
            room = max(0, 500 - state.queued_count)
            batch = [
                turns.request(f"q{sent + i}", model="demo:echo")
                for i in range(min(room, QUEUE - sent))
            ]
            await _signal_all(handle, batch)
            sent += len(batch)
            await asyncio.sleep(1)
        await _wait_state(turns, conv, lambda s: s.turn_count >= QUEUE and not s.queued_count, 3600)
        lengths = await _history_lengths(client, conv)
        print(
            f"steady queue of {QUEUE} requests: {time.monotonic() - t0:.0f}s, {len(lengths)} runs,"
            f" longest run history {max(lengths)} events (limit 51,200)"
        )
        assert max(lengths) < 51_200 // 4
    finally:
        await handle.terminate()
        worker.stop()


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-robustness-") as name:
        tmp = Path(name)
        async with temporal_server(tmp) as (address, _config):
            client = await Client.connect(address, data_converter=pydantic_data_converter)
            turns = TurnsClient(client, f"robust-{uuid.uuid4().hex[:8]}")
            await burst(client, turns, tmp, address, valid=False)
            await burst(client, turns, tmp, address, valid=True)
            await long_queue(client, turns, tmp, address)


if __name__ == "__main__":
    asyncio.run(main())
