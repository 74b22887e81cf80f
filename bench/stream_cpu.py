"""Micro-benchmark: the worker CPU a streamed token costs on the chunk stream, apart from
Temporal and from any provider SDK.

``N`` paced streams at once in one process (each a text delta every 1/60 s, the streams'
phases spread at random, as real streams' are), each driven through the engine's
``consume`` as a model step drives its provider's stream, with:

* ``none``: no chunk stream (the pacing and ``consume`` alone: the baseline);
* ``memory``: a ``ChunkPublisher`` per stream on the in-memory backend (the publisher's own
  work: its batches, their encoding, its background appends);
* ``sqlite``: a publisher per stream on one SQLite chunk-stream file, nobody reading;
* ``sqlite+reader``: the same, every stream followed by a reader in another process (each
  commit wakes it), as a worker's streams are by a client or ``turns serve``.

Each mode runs in a process of its own, ``--rounds`` rounds after a warm-up; it prints the
median CPU per token (user + system of the process, ``time.process_time``) and that minus
``none``'s. Usage: ``.venv/bin/python -m bench.stream_cpu [--streams 6] [--tokens 600]
[--rounds 3] [--modes none,memory,sqlite,sqlite+reader]``. Not a test: timings depend on
the machine; compare the modes of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from durable_turns.activities.streaming import consume
from durable_turns.messages import FinishChunk, StreamPart, TextDelta
from durable_turns.streams import ChunkPublisher, ChunkStreamBackend, open_stream_backend
from durable_turns.streams.base import MemoryBackend

ROOT = Path(__file__).resolve().parents[1]

MODES = ("none", "memory", "sqlite", "sqlite+reader")
TOKENS_PER_S = 60.0


async def paced(tokens: int) -> AsyncIterator[StreamPart]:
    """``tokens`` text deltas at a model's pace, from a random phase."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(random.random() / TOKENS_PER_S)
    due = loop.time()
    for i in range(tokens):
        due += 1 / TOKENS_PER_S
        await asyncio.sleep(max(0.0, due - loop.time()))
        yield TextDelta(text=f" tok{i}")
    yield FinishChunk(finish_reason="stop")


async def one_stream(backend: ChunkStreamBackend | None, tokens: int, followed: bool) -> int:
    publisher = None
    if backend is not None:
        publisher = ChunkPublisher(backend, uuid.uuid4().hex, step=0, attempt=1, owner="bench")
        if followed:
            print("FOLLOW", publisher.stream_id, flush=True)  # the parent tells the reader
    snap = await consume(
        paced(tokens),
        stall_timeout_ms=30_000,
        heartbeat=lambda *_: None,
        heartbeat_every_s=5.0,
        sink=None if publisher is None else publisher.publish_chunk,
    )
    if publisher is not None:
        await publisher.turn_finish("completed")
        await publisher.aclose()
    return snap.chunks - 1  # the finish is no token


async def run_mode(mode: str, path: str, streams: int, tokens: int, rounds: int) -> None:
    """One mode's process: a warm-up, then ``rounds`` rounds; prints ``RESULT`` per round."""
    backend: ChunkStreamBackend | None = None
    if mode == "memory":
        backend = MemoryBackend()
    elif mode.startswith("sqlite"):
        backend = open_stream_backend(f"sqlite:///{path}")
        assert backend is not None
        await backend.open()
    followed = mode == "sqlite+reader"
    for i in range(rounds + 1):
        began = time.process_time()
        done = await asyncio.gather(
            *(one_stream(backend, tokens, followed) for _ in range(streams))
        )
        if i:
            print(f"RESULT {(time.process_time() - began) / sum(done) * 1e6:.1f}", flush=True)
    if backend is not None:
        await backend.close()


async def read_all(path: str) -> None:
    """The reader's process: follows every stream id it is given on stdin to its end."""
    backend = open_stream_backend(f"sqlite:///{path}")
    assert backend is not None
    await backend.open()
    loop = asyncio.get_running_loop()
    following: set[asyncio.Task[None]] = set()

    async def follow(stream_id: str) -> None:
        async for _ in backend.follow(stream_id):
            pass

    while line := await loop.run_in_executor(None, sys.stdin.readline):
        task = asyncio.create_task(follow(line.strip()))
        following.add(task)
        task.add_done_callback(following.discard)


def measure(
    mode: str, path: str, reader: subprocess.Popen[str], args: argparse.Namespace
) -> list[float]:
    argv = [sys.executable, "-m", "bench.stream_cpu", "--mode", mode, "--path", path]
    argv += ["--streams", str(args.streams), "--tokens", str(args.tokens)]
    argv += ["--rounds", str(args.rounds)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and reader.stdin is not None
    per_token: list[float] = []
    for line in proc.stdout:
        kind, _, value = line.strip().partition(" ")
        if kind == "FOLLOW":
            reader.stdin.write(value + "\n")
            reader.stdin.flush()
        elif kind == "RESULT":
            per_token.append(float(value))
    if proc.wait() != 0:
        raise RuntimeError(f"mode {mode} failed")
    return per_token


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stream_cpu", description=__doc__)
    parser.add_argument("--streams", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode's process
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--reader", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reader:
        asyncio.run(read_all(args.path))
        return
    if args.mode:
        asyncio.run(run_mode(args.mode, args.path, args.streams, args.tokens, args.rounds))
        return
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown modes {sorted(unknown)}; known: {', '.join(MODES)}")
    with tempfile.TemporaryDirectory(prefix="bench-stream-cpu-") as tmp:
        path = str(Path(tmp) / "chunks.db")
        reader_argv = [sys.executable, "-m", "bench.stream_cpu", "--reader", "--path", path]
        reader = subprocess.Popen(reader_argv, cwd=ROOT, stdin=subprocess.PIPE, text=True)
        try:
            results = {mode: measure(mode, path, reader, args) for mode in modes}
        finally:
            reader.kill()
            reader.wait()
    base = statistics.median(results["none"]) if "none" in results else None
    print(
        f"{args.streams} streams × {args.tokens} tokens at {TOKENS_PER_S:g}/s, {args.rounds} rounds"
    )
    print(f"{'mode':<15} {'CPU µs/token':>13} {'above none':>11}  rounds")
    for mode, values in results.items():
        value = statistics.median(values)
        above = "" if base is None else f"{value - base:+.0f}"
        rounds = " ".join(f"{v:.0f}" for v in values)
        print(f"{mode:<15} {value:>13.0f} {above:>11}  {rounds}")


if __name__ == "__main__":
    main()
