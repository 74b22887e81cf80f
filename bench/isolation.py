"""Micro-benchmark: what running user code on user loops costs (``activities/isolation.py``).

User ``async def`` tools and hooks run on an event loop of their own thread, so a blocking
one delays only its own turn; this measures the price of that hop, per call and per chunk:

* ``hook call``: a no-op ``async def`` hook awaited directly on the worker's loop, against
  ``isolation.run`` (one trip to a user loop and back per call);
* ``on_chunk``: a no-op ``on_chunk`` called per chunk on the loop (the old path), against
  the step's ``ChunkStage`` (a deque append per chunk, the user loop woken when idle; the
  figure includes the final ``drain``), chunks pushed in bursts as a provider delivers them;
* ``transform``: a no-op stream transform applied inline (the built-ins' path), against a
  step's ``Lease.call`` (a trip to the user loop's thread and back per chunk).

``--loaded`` keeps every core busy with spinning processes while it measures (the machines
are shared: the hop costs thread wake-ups, which a busy machine makes slower).

Usage: ``.venv/bin/python bench/isolation.py [--calls 5000] [--chunks 20000] [--repeats 5]
[--loaded]``. Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from durable_turns.activities import isolation
from durable_turns.messages import StreamPart, TextDelta
from durable_turns.transforms import _apply


async def noop_hook(*args: Any) -> None:
    return None


def noop_transform(part: StreamPart) -> StreamPart:
    return part


async def per_call(run: Callable[[], Awaitable[Any]], calls: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(calls):
        await run()
    return (time.perf_counter_ns() - started) / calls / 1000


async def hook_direct(calls: int) -> float:
    return await per_call(noop_hook, calls)


async def hook_isolated(calls: int) -> float:
    return await per_call(lambda: isolation.run("hook bench", noop_hook), calls)


async def chunks_direct(chunks: int, burst: int) -> float:
    parts = [TextDelta(text=f"tok{i % 97} ") for i in range(chunks)]
    started = time.perf_counter_ns()
    for i in range(0, chunks, burst):
        for p in parts[i : i + burst]:
            await noop_hook(p)
        await asyncio.sleep(0)
    return (time.perf_counter_ns() - started) / chunks / 1000


async def chunks_staged(chunks: int, burst: int) -> float:
    parts = [TextDelta(text=f"tok{i % 97} ") for i in range(chunks)]
    stage = isolation.ChunkStage(noop_hook, "hook on_chunk")
    started = time.perf_counter_ns()
    try:
        for i in range(0, chunks, burst):
            for p in parts[i : i + burst]:
                await stage.push(p)
            await asyncio.sleep(0)
        await stage.drain()
    finally:
        stage.close()
    return (time.perf_counter_ns() - started) / chunks / 1000


async def transform_inline(chunks: int) -> float:
    parts = [TextDelta(text=f"tok{i % 97} ") for i in range(chunks)]
    started = time.perf_counter_ns()
    for p in parts:
        _apply(p, [noop_transform])
        await asyncio.sleep(0)
    return (time.perf_counter_ns() - started) / chunks / 1000


async def transform_leased(chunks: int) -> float:
    parts = [TextDelta(text=f"tok{i % 97} ") for i in range(chunks)]
    lease = isolation.Lease()
    call = functools.partial(lease.call, "stream transform")
    started = time.perf_counter_ns()
    try:
        for p in parts:
            await call(_apply, p, [noop_transform])
    finally:
        lease.close()
    return (time.perf_counter_ns() - started) / chunks / 1000


@contextlib.contextmanager
def busy_cores(on: bool) -> Iterator[None]:
    n = max(2, os.cpu_count() or 2) if on else 0
    spin = [sys.executable, "-c", "while True:\n    pass\n"]
    procs = [subprocess.Popen(spin) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--burst", type=int, default=16, help="chunks per event-loop turn")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--loaded", action="store_true", help="keep every core busy meanwhile")
    a = ap.parse_args()
    isolation.configure(isolation.USER_LOOPS)
    cases: list[tuple[str, Callable[[], Awaitable[float]]]] = [
        ("hook call, direct", lambda: hook_direct(a.calls)),
        ("hook call, user loop", lambda: hook_isolated(a.calls)),
        ("on_chunk, on the loop", lambda: chunks_direct(a.chunks, a.burst)),
        ("on_chunk, ChunkStage", lambda: chunks_staged(a.chunks, a.burst)),
        ("transform, inline", lambda: transform_inline(a.chunks)),
        ("transform, Lease.call", lambda: transform_leased(min(a.chunks, a.calls))),
    ]
    with busy_cores(a.loaded):
        for _, case in cases:  # warm-up: the pool's threads start here
            await case()
        print(f"{'case':<24} {'median µs':>10} {'min µs':>8}  (per call / chunk)")
        for name, case in cases:
            runs = [await case() for _ in range(a.repeats)]
            print(f"{name:<24} {statistics.median(runs):>10.2f} {min(runs):>8.2f}")


if __name__ == "__main__":
    asyncio.run(main())
