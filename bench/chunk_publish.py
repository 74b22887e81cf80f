"""Micro-benchmark: what one ``ChunkPublisher.publish()`` costs, per backend.

``publish`` runs once per model chunk on the path the stall watchdog measures, so it must
stay in the microseconds whatever the backend: it only appends to a buffer, and batches go
out from a background task. This publishes text deltas in bursts (as a provider's stream
delivers them), yielding to the event loop between bursts so flushes happen, and reports:

* ``publish µs``: the time inside ``publish_chunk()`` calls only (median over repeats);
* ``e2e µs/chunk``: wall time from the first publish to ``aclose()``, i.e. including the
  JSON encoding and the backend appends, divided by the chunks;
* ``appends``: backend round trips per run.

Usage: ``.venv/bin/python bench/chunk_publish.py [--chunks 20000] [--repeats 7]
[--redis redis://127.0.0.1:6379/0] [--burst 16]``. An unreachable Redis is reported, not
fatal. Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from durable_turns.messages import TextDelta
from durable_turns.streams import ChunkPublisher, ChunkStreamBackend, open_stream_backend


async def one_run(backend: ChunkStreamBackend, chunks: int, burst: int) -> tuple[float, float, int]:
    """(publish µs per chunk, end-to-end µs per chunk, appends) for one simulated step."""
    deltas = [TextDelta(text=f"tok{i % 97} ") for i in range(chunks)]
    pub = ChunkPublisher(backend, f"bench-{uuid.uuid4().hex}", step=0, attempt=1)
    clock = time.perf_counter_ns
    inside = 0
    start = clock()
    for i in range(0, chunks, burst):
        t0 = clock()
        for d in deltas[i : i + burst]:
            pub.publish_chunk(d)
        inside += clock() - t0
        await asyncio.sleep(0)  # the provider's next network read: flushes may run here
    await pub.aclose()
    total = clock() - start
    await backend.delete(pub.stream_id)
    return inside / chunks / 1000, total / chunks / 1000, pub.appends


async def bench(name: str, url: str, chunks: int, repeats: int, burst: int) -> list[str]:
    backend = open_stream_backend(url)
    assert backend is not None
    try:
        await backend.open()
    except Exception as e:
        return [name, f"unavailable: {e!r}"[:60], "", "", ""]
    try:
        await one_run(backend, min(chunks, 2000), burst)  # warm-up
        runs = [await one_run(backend, chunks, burst) for _ in range(repeats)]
    finally:
        await backend.close()
    publish = [r[0] for r in runs]
    return [
        name,
        f"{statistics.median(publish):.2f}",
        f"{min(publish):.2f}",
        f"{statistics.median(r[1] for r in runs):.2f}",
        f"{statistics.median(r[2] for r in runs):.0f}",
    ]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--burst", type=int, default=16, help="chunks per event-loop turn")
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        backends = [
            ("memory", f"memory://bench-{uuid.uuid4().hex}"),
            ("sqlite", f"sqlite:///{tmp}/chunks.db"),
            ("redis", f"{args.redis}?prefix=bench:chunks:&ttl=60&maxlen=1000"),
        ]
        rows = [["backend", "publish µs (median)", "publish µs (min)", "e2e µs/chunk", "appends"]]
        for name, url in backends:
            rows.append(await bench(name, url, args.chunks, args.repeats, args.burst))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"{args.chunks} chunks × {args.repeats} repeats, bursts of {args.burst}")
    for j, row in enumerate(rows):
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if j == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    asyncio.run(main())
