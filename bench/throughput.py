"""3 · Throughput: 100 and 500 concurrent 3-step turns on one worker process.

The engine's worker runs as a real process (``python worker.py``, SQLite store); each turn
is the first of its own conversation (distinct ids) and makes 2 calls of the ``get_weather``
tool. Against the floor, on a floor worker process with the same concurrency limits:

* the same shape: a conversation workflow started by update-with-start, its "open"
  activity, a child running the engine turn's 7 activities (begin, 3 steps, 2 tools, finish);
* a bare workflow running 3 no-op activities (one per step, no parent).

Per level: turns/s (N ÷ wall time of the burst), p50/p95 latency (send → result), the worker
process's peak RSS (``VmHWM``), and CPU seconds per turn of the worker and of the server.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bench import floor
from bench.common import (
    Bench,
    Row,
    WorkerProcess,
    cpu_seconds,
    median,
    ms,
    percentile,
    script,
    start_engine_worker,
    start_floor_worker,
    tool_steps,
)
from durable_turns.client import TurnsClient

SHAPE_ACTIVITIES = 7  # begin, 3 model steps, 2 tool calls, finish (the "open" one is extra)


async def burst(
    n: int, one: Callable[[int], Awaitable[bool]], pids: list[int | None]
) -> dict[str, Any]:
    """``n`` turns at once: rate, latency percentiles, CPU per turn of each of ``pids``."""
    latencies: list[float] = []
    failed = 0

    async def timed(i: int) -> None:
        nonlocal failed
        started = time.perf_counter()
        ok = await one(i)
        latencies.append(time.perf_counter() - started)
        failed += not ok

    cpu = [cpu_seconds(p) if p else 0.0 for p in pids]
    started = time.perf_counter()
    await asyncio.gather(*(timed(i) for i in range(n)))
    wall = time.perf_counter() - started
    return {
        "turns_per_s": n / wall,
        "p50_s": percentile(latencies, 50),
        "p95_s": percentile(latencies, 95),
        "failed": failed,
        "cpu_s_per_turn": [
            ((cpu_seconds(p) if p else 0.0) - c) / n for p, c in zip(pids, cpu, strict=True)
        ],
    }


async def level(b: Bench, n: int, repeats: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    engine_q, floor_q = f"tp-engine-{n}-{tag}", f"tp-floor-{n}-{tag}"
    engine: WorkerProcess = await asyncio.to_thread(start_engine_worker, b.address, engine_q, b.tmp)
    bare_w: WorkerProcess = await asyncio.to_thread(start_floor_worker, b.address, floor_q, b.tmp)
    turns = TurnsClient(b.client, engine_q)
    model = script(b.tmp, "throughput", tool_steps(3))

    def run_id(kind: str, r: int, i: int) -> str:
        return f"tp-{kind}-{n}-{tag}-{r}-{i}"

    def engine_turn(r: int) -> Callable[[int], Awaitable[bool]]:
        async def one(i: int) -> bool:
            result = await turns.send(
                run_id("engine", r, i), "What is the weather in Oslo?", model=model
            )
            return result.status == "completed"

        return one

    def shape_turn(r: int) -> Callable[[int], Awaitable[bool]]:
        async def one(i: int) -> bool:
            conv = run_id("shape", r, i)
            return (
                await floor.send(b.client, floor_q, conv, "1", SHAPE_ACTIVITIES) == SHAPE_ACTIVITIES
            )

        return one

    def bare_turn(r: int) -> Callable[[int], Awaitable[bool]]:
        async def one(i: int) -> bool:
            return await floor.bare(b.client, floor_q, run_id("bare", r, i), 3) == 3

        return one

    results: dict[str, list[dict[str, Any]]] = {"engine": [], "shape": [], "bare": []}
    try:
        for make in (engine_turn, shape_turn, bare_turn):  # warm up both workers
            await burst(5, make(-1), [])
        for r in range(repeats):
            results["engine"].append(await burst(n, engine_turn(r), [engine.pid, b.server_pid]))
            results["shape"].append(await burst(n, shape_turn(r), [bare_w.pid, b.server_pid]))
            results["bare"].append(await burst(n, bare_turn(r), [bare_w.pid, b.server_pid]))
        rss = {"engine_mib": engine.peak_rss_mib(), "floor_mib": bare_w.peak_rss_mib()}
    finally:
        engine.stop()
        bare_w.stop()
    return {"runs": results, "peak_rss": rss}


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {
        "turns_per_s": median(r["turns_per_s"] for r in runs),
        "p50_s": median(r["p50_s"] for r in runs),
        "p95_s": median(r["p95_s"] for r in runs),
        "worker_cpu_ms": median(r["cpu_s_per_turn"][0] for r in runs) * 1000,
        "server_cpu_ms": median(r["cpu_s_per_turn"][1] for r in runs) * 1000,
        "failed": sum(r["failed"] for r in runs),
    }


async def run(b: Bench) -> tuple[list[Row], dict[str, Any]]:
    levels, repeats = ((10, 30), [1, 1]) if b.quick else ((100, 500), [3, 2])
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for n, times in zip(levels, repeats, strict=True):
        raw[str(n)] = data = await level(b, n, times)
        e, s, f = (summary(data["runs"][k]) for k in ("engine", "shape", "bare"))
        rss = data["peak_rss"]
        label = f"{n} concurrent 3-step turns"
        rows += [
            Row(
                "3",
                f"{label}: throughput",
                f"{e['turns_per_s']:.1f} turns/s",
                f"floor {s['turns_per_s']:.1f} turns/s (same shape);"
                f" bare 3-activity workflow {f['turns_per_s']:.1f}/s",
                e["turns_per_s"] / s["turns_per_s"],
                note=f"{e['failed']} engine turn(s) did not complete" if e["failed"] else "",
            ),
            Row(
                "3",
                f"{label}: latency p50 · p95",
                f"{ms(e['p50_s'])} · {ms(e['p95_s'])}",
                f"floor {ms(s['p50_s'])} · {ms(s['p95_s'])};"
                f" bare {ms(f['p50_s'])} · {ms(f['p95_s'])}",
                e["p95_s"] / s["p95_s"],
            ),
            Row(
                "3",
                f"{label}: worker peak RSS",
                f"{rss['engine_mib']:.0f} MiB",
                f"floor worker {rss['floor_mib']:.0f} MiB",
                rss["engine_mib"] / rss["floor_mib"],
            ),
            Row(
                "3",
                f"{label}: CPU per turn, worker · server",
                f"{e['worker_cpu_ms']:.1f} ms · {e['server_cpu_ms']:.1f} ms",
                f"floor {s['worker_cpu_ms']:.1f} ms · {s['server_cpu_ms']:.1f} ms",
                (e["worker_cpu_ms"] + e["server_cpu_ms"])
                / (s["worker_cpu_ms"] + s["server_cpu_ms"]),
            ),
        ]
    rows[0].note = (
        f"medians of {' and '.join(map(str, repeats))} bursts; ratio = engine ÷ floor (same"
        " shape); the latency ratio is of p95; peak RSS over all bursts of a level, one fresh"
        " worker process per level"
    )
    return rows, raw
