"""No worker at all, and a front door shut down: how soon a user is told.

    python -m bench.no_worker [--rounds 10] [--streams 20]

1. A chat posted while no worker polls its task queue: ``POST /api/chat`` → the transient
   ``data-waiting`` frame (the page shows "waiting for a worker"); beside it, in the same run
   and the same door, a message posted behind a running reply → its ``data-queued`` frame
   (the door's existing queued path, the same half-second grace). Target: ≤ 2 s.
2. ``TurnsClient.state`` on a conversation no worker serves → ``NoWorker``; beside it,
   ``state`` answered by a worker. Target: ≤ 2 s (was: the server's 30 s query wait).
3. ``turns serve`` with ``streams`` open replies gets SIGTERM → every response ended with
   ``data-resume``, and → the process gone; beside it, SIGTERM of an idle door. Target:
   ≤ 10 s (``TURNS_HTTP_SHUTDOWN_GRACE_S`` is 5 s by default).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from bench.common import (
    Row,
    loadavg,
    median,
    ms,
    percentile,
    render_text,
    run_meta,
    script,
    start_engine_worker,
    temporal_server,
    write_results,
)
from bench.web import body, start_front_door
from durable_turns.client import TurnsClient
from durable_turns.codec import data_converter_from_env
from durable_turns.errors import NoWorker

SLOW = [{"text": "word", "repeat": 400, "delay_ms": 50}]


async def until_chunk(
    http: httpx.AsyncClient, url: str, chat: str, kind: str, message_id: str = ""
) -> float:
    """POST a message; seconds until the first frame of type ``kind`` (then the response is
    closed, which stops nothing: the request stays in the engine)."""
    began = time.perf_counter()
    sent = body(chat, "hi", message_id or uuid.uuid4().hex)
    async with http.stream("POST", f"{url}/api/chat", json=sent) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {") and json.loads(line[6:]).get("type") == kind:
                return time.perf_counter() - began
    raise RuntimeError(f"no {kind} frame")


async def open_reply(
    http: httpx.AsyncClient, url: str, chat: str, ready: asyncio.Event
) -> tuple[str, float]:
    """Follow a chat's running reply until the response ends: (its last frame's type, when)."""
    last = ""
    async with http.stream("GET", f"{url}/api/chat/{chat}/stream") as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                payload = line[6:]
                last = payload if payload == "[DONE]" else json.loads(payload).get("type", "")
                ready.set()
    return last, time.perf_counter()


def stats(values: list[float]) -> str:
    return f"p50 {ms(median(values))}, p95 {ms(percentile(values, 95))}, max {ms(max(values))}"


async def run(rounds: int, streams: int) -> tuple[list[Row], dict[str, Any], dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-no-worker-"))
    load_start = loadavg()
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    async with temporal_server(tmp) as (address, server):
        client = await Client.connect(address, data_converter=data_converter_from_env())
        # --- 1 and 2: no worker --------------------------------------------------------------
        empty = f"none-{uuid.uuid4().hex[:6]}"
        door, url = start_front_door(address, empty, tmp)
        queue = f"served-{uuid.uuid4().hex[:6]}"
        slow = script(tmp, "slow", SLOW)
        worker = start_engine_worker(address, queue, tmp, TURNS_MODEL=slow)
        served_door, served_url = start_front_door(address, queue, tmp)
        unserved, served = TurnsClient(client, empty), TurnsClient(client, queue)
        waiting_s, queued_s, no_worker_s, state_s = [], [], [], []
        async with httpx.AsyncClient(timeout=120) as http:
            for _ in range(rounds):
                chat = f"w-{uuid.uuid4().hex[:8]}"
                waiting_s.append(await until_chunk(http, url, chat, "data-waiting"))
                began = time.perf_counter()
                with contextlib.suppress(NoWorker):
                    await unserved.state(chat)
                no_worker_s.append(time.perf_counter() - began)
                busy = f"q-{uuid.uuid4().hex[:8]}"
                first = asyncio.create_task(until_chunk(http, served_url, busy, "text-delta"))
                await first
                second = uuid.uuid4().hex
                queued_s.append(await until_chunk(http, served_url, busy, "data-queued", second))
                began = time.perf_counter()
                await served.state(busy)
                state_s.append(time.perf_counter() - began)
                await served.cancel(busy, f"ui-{second}")  # the queued request, then the reply
                await served.cancel(busy)
        rows.append(Row("1", "no worker: POST /api/chat → data-waiting frame", stats(waiting_s),
                        f"behind a running reply → data-queued: {ms(median(queued_s))}",
                        median(waiting_s) / median(queued_s), "≤ 2 s",
                        "met" if max(waiting_s) <= 2 else "MISSED",
                        note=f"{rounds} chats, a new conversation each; both wait the door's 0.5 s grace first"))  # fmt: skip
        rows.append(Row("2", "no worker: TurnsClient.state → NoWorker", stats(no_worker_s),
                        f"state answered by a worker: {ms(median(state_s))}",
                        median(no_worker_s) / median(state_s), "≤ 2 s",
                        "met" if max(no_worker_s) <= 2 else "MISSED",
                        note="the query gets 0.5 s, then DescribeTaskQueue ×2 and DescribeWorkflowExecution"))  # fmt: skip
        raw.update(waiting_s=waiting_s, queued_s=queued_s, no_worker_s=no_worker_s, state_s=state_s)
        door.stop()

        # --- 3: SIGTERM of a door with open streams ----------------------------------------------
        idle_door, _ = start_front_door(address, queue, tmp)
        began = time.perf_counter()
        idle_door.proc.terminate()
        await asyncio.to_thread(idle_door.proc.wait, 60)
        idle_s = time.perf_counter() - began
        chats = [f"s-{uuid.uuid4().hex[:8]}" for _ in range(streams)]
        async with httpx.AsyncClient(timeout=120) as http:
            posts = [
                asyncio.create_task(until_chunk(http, served_url, c, "text-delta")) for c in chats
            ]
            await asyncio.gather(*posts)
            readies = [asyncio.Event() for _ in chats]
            follow = [
                asyncio.create_task(open_reply(http, served_url, c, e))
                for c, e in zip(chats, readies, strict=True)
            ]
            await asyncio.gather(*(e.wait() for e in readies))
            began = time.perf_counter()
            served_door.proc.terminate()
            ended = await asyncio.gather(*follow)
            await asyncio.to_thread(served_door.proc.wait, 60)
            gone_s = time.perf_counter() - began
        resumed = sum(1 for last, _ in ended if last == "data-resume")
        end_s = max(at for _, at in ended) - began
        rows.append(Row("3", f"SIGTERM with {streams} open replies → every response ended",
                        ms(end_s), "", None, "", "met" if resumed == streams else "MISSED",
                        note=f"{resumed}/{streams} ended with data-resume (the rest: {[last for last, _ in ended if last != 'data-resume'][:3]})"))  # fmt: skip
        rows.append(Row("3", f"SIGTERM with {streams} open replies → process gone", ms(gone_s),
                        f"idle door: {ms(idle_s)}", gone_s / idle_s, "≤ 10 s",
                        "met" if gone_s <= 10 else "MISSED"))  # fmt: skip
        raw.update(sigterm={"streams": streams, "resumed": resumed, "end_s": end_s, "gone_s": gone_s, "idle_s": idle_s})  # fmt: skip
        served_door.stop()
        worker.stop()
    meta = run_meta(
        f"no worker and shutdown: {rounds} rounds; SIGTERM with {streams} open replies",
        f"python -m bench.no_worker --rounds {rounds} --streams {streams}",
        load_start,
        server,
    )
    return rows, raw, meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--streams", type=int, default=20)
    args = parser.parse_args()
    started = time.monotonic()
    rows, raw, meta = asyncio.run(run(args.rounds, args.streams))
    meta["seconds"] = round(time.monotonic() - started)
    print(render_text(rows))
    with contextlib.suppress(Exception):
        print(f"written: {write_results(meta, rows, raw, 'no_worker')}")


if __name__ == "__main__":
    main()
