"""The browser front door: its own cost on the first token, its cost with 1,000 browsers.

    python -m bench.web [--rounds 20] [--turns 100] [--watchers 10]

1. Time to first token, paired in one run: a warm conversation's turn read the Python way
   (``TurnsClient.start`` then ``chunks``, what the front door itself does) against the same
   turn asked through ``POST /api/chat`` and read as SSE (the front door's own cost; target
   +5 ms at most).
2. One front-door process (``turns serve``) serving ``turns`` streaming turns at a reader's
   pace (200 tokens at 20 ms each), each watched by ``watchers`` SSE clients (the POST and
   the rest resuming with ``GET /stream``): its CPU seconds, peak memory, and whether every
   client got every reply whole.
3. Bytes per token on the wire: what the SSE frames of a reply weigh per streamed token.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    Row,
    WorkerProcess,
    cpu_seconds,
    engine_env,
    free_port,
    loadavg,
    median,
    ms,
    proc_status,
    render_text,
    run_meta,
    script,
    start_engine_worker,
    temporal_server,
    write_results,
)

TOKENS = 200
PACE_MS = 20


def start_front_door(
    address: str, queue: str, tmp: Path, **extra: str
) -> tuple[WorkerProcess, str]:
    port = free_port()
    proc = WorkerProcess(
        [
            sys.executable,
            "-c",
            "from durable_turns.cli import main; main()",
            "serve",
            "--port",
            str(port),
        ],
        engine_env(address, queue, tmp, TURNS_HTTP_MAX_STREAMS="20000", **extra),
        tmp / f"serve-{port}.log",
        "front door on",
    )
    proc.wait_ready()
    return proc, f"http://127.0.0.1:{port}"


def body(chat: str, text: str, message_id: str) -> dict[str, Any]:
    return {
        "id": chat,
        "trigger": "submit-message",
        "messages": [{"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}],
    }


async def first_delta_sse(http: httpx.AsyncClient, url: str, chat: str) -> float:
    began = time.perf_counter()
    took = None
    async with http.stream("POST", f"{url}/api/chat", json=body(chat, "hi", uuid.uuid4().hex)) as r:
        async for line in r.aiter_lines():  # to the end: the turn finishes before the next
            if took is None and '"text-delta"' in line:
                took = time.perf_counter() - began
    if took is None:
        raise RuntimeError("no text-delta")
    return took


async def first_delta_python(turns: Any, chat: str) -> float:
    began = time.perf_counter()
    started = await turns.start(chat, "hi")
    async for event in turns.chunks(chat, started.turn_number):
        if event.type == "chunk" and event.data.get("type") == "text-delta":
            took = time.perf_counter() - began
            await turns.result(chat, started)
            return took
    raise RuntimeError("no text-delta")


async def watch(
    http: httpx.AsyncClient,
    method: str,
    url: str,
    started: asyncio.Event | None = None,
    after: asyncio.Event | None = None,
    **kw: Any,
) -> tuple[str, int, int]:
    """One SSE client to the end: (the reply's text, frames, bytes). ``after``: connect once
    it is set; ``started``: set it at the reply's ``start``."""
    if after is not None:
        await after.wait()
    text: list[str] = []
    frames = size = 0
    async with http.stream(method, url, **kw) as r:
        if r.status_code != 200:
            return "", 0, 0
        async for line in r.aiter_lines():
            size += len(line) + 1
            if line.startswith("data: "):
                frames += 1
                if started is not None and '"start"' in line:
                    started.set()
                if '"text-delta"' in line:
                    text.append(json.loads(line[6:])["delta"])
    return "".join(text), frames, size


async def run(
    rounds: int, n_turns: int, watchers: int
) -> tuple[list[Row], dict[str, Any], dict[str, Any]]:
    from temporalio.client import Client

    from durable_turns.client import TurnsClient
    from durable_turns.codec import data_converter_from_env

    tmp = Path(tempfile.mkdtemp(prefix="bench-web-"))
    load_start = loadavg()
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    async with temporal_server(tmp) as (address, server):
        # --- 1. the first token --------------------------------------------------------------
        queue = f"web-{uuid.uuid4().hex[:6]}"
        quick = script(tmp, "quick", [{"text": "Hello there, how are you today?"}])
        worker = start_engine_worker(address, queue, tmp, TURNS_MODEL=quick)
        door, url = start_front_door(address, queue, tmp, TURNS_MODEL=quick)
        client = await Client.connect(address, data_converter=data_converter_from_env())
        turns = TurnsClient(client, queue, stream_url=f"sqlite:///{tmp / 'data' / 'chunks.db'}")
        py_chat, web_chat = f"py-{uuid.uuid4().hex[:6]}", f"web-{uuid.uuid4().hex[:6]}"
        async with httpx.AsyncClient(timeout=120) as http:
            await turns.send(py_chat, "warm up")
            await first_delta_sse(http, url, web_chat)
            py_s, web_s = [], []
            for i in range(rounds + 3):
                a = await first_delta_python(turns, py_chat)
                b = await first_delta_sse(http, url, web_chat)
                if i >= 3:  # warm-up rounds
                    py_s.append(a)
                    web_s.append(b)
        added = median(web_s) - median(py_s)
        rows.append(Row("1", "first token, warm turn: POST /api/chat → first text-delta frame",
                        ms(median(web_s)), f"TurnsClient.start → chunks: {ms(median(py_s))}",
                        median(web_s) / median(py_s), "≤ +5 ms", "met" if added <= 0.005 else "MISSED",
                        note=f"the front door adds {added * 1000:+.1f} ms (medians of {rounds} paired rounds)"))  # fmt: skip
        raw["ttft_s"] = {"python": py_s, "web": web_s}
        door.stop()
        worker.stop()

        # --- 2. 1,000 browsers -------------------------------------------------------------
        queue = f"web-load-{uuid.uuid4().hex[:6]}"
        paced = script(tmp, "paced", [{"text": "tok", "repeat": TOKENS, "delay_ms": PACE_MS}])
        workers = [start_engine_worker(address, queue, tmp, TURNS_MODEL=paced) for _ in range(2)]
        door, url = start_front_door(address, queue, tmp)
        expected = " ".join(["tok"] * TOKENS)
        limits = httpx.Limits(max_connections=n_turns * watchers + 10, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=300, limits=limits) as http:
            idle_cpu, idle_rss = cpu_seconds(door.pid), proc_status(door.pid, "VmRSS") / 1024
            cpu0, began = cpu_seconds(door.pid), time.perf_counter()
            chats = [f"load-{i}-{uuid.uuid4().hex[:4]}" for i in range(n_turns)]
            begun = {c: asyncio.Event() for c in chats}
            posts = [
                asyncio.create_task(
                    watch(http, "POST", f"{url}/api/chat", begun[c], json=body(c, "go", "m"))
                )
                for c in chats
            ]
            # each chat's watchers connect once its reply has begun (a browser that reloads)
            gets = [
                asyncio.create_task(
                    watch(http, "GET", f"{url}/api/chat/{c}/stream", after=begun[c])
                )
                for c in chats
                for _ in range(watchers - 1)
            ]
            results = await asyncio.gather(*posts, *gets)
            wall = time.perf_counter() - began
            cpu = cpu_seconds(door.pid) - cpu0
        peak = door.peak_rss_mib()
        whole = sum(1 for text, _, _ in results if text == expected)
        late = sum(1 for text, _, _ in results if text == "")
        frames = sum(f for _, f, _ in results)
        wire = sum(s for _, _, s in results)
        tokens = TOKENS * len(results)
        rows.append(Row("2", f"{len(results)} SSE clients on {n_turns} streaming turns: replies whole",
                        f"{whole}/{len(results)}", "", None, "all", "met" if whole + late == len(results) and whole else "MISSED",
                        note=f"{late} watchers connected after their turn had ended (204); a turn streams {TOKENS} tokens at {PACE_MS} ms"))  # fmt: skip
        rows.append(Row("2", "front-door CPU for the whole run", f"{cpu:.2f} s",
                        f"{wall:.1f} s of wall time", cpu / wall, "", "",
                        note=f"{cpu / max(tokens, 1) * 1e6:.1f} µs per token delivered to a client; idle process {idle_cpu:.2f} s CPU at start"))  # fmt: skip
        rows.append(Row("2", "front-door peak memory", f"{peak:.0f} MiB", f"idle {idle_rss:.0f} MiB",
                        peak / idle_rss if idle_rss else None, "", "",
                        note=f"{(peak - idle_rss) * 1024 / max(len(results), 1):.0f} KiB per open stream above idle"))  # fmt: skip
        rows.append(Row("3", "bytes per token on the wire", f"{wire / max(tokens, 1):.1f} B",
                        f"{len('tok ')} B of text per token", None, "", "",
                        note=f"{frames / max(len(results), 1):.0f} frames per reply"))  # fmt: skip
        raw["load"] = {"clients": len(results), "whole": whole, "late": late, "cpu_s": cpu,
                       "wall_s": wall, "peak_rss_mib": peak, "idle_rss_mib": idle_rss,
                       "wire_bytes": wire, "frames": frames}  # fmt: skip
        door.stop()
        for w in workers:
            w.stop()
    meta = run_meta(
        f"front door: {rounds} paired first-token rounds; {n_turns} turns × {watchers} SSE clients",
        f"python -m bench.web --rounds {rounds} --turns {n_turns} --watchers {watchers}",
        load_start,
        server,
    )
    return rows, raw, meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--watchers", type=int, default=10)
    args = parser.parse_args()
    started = time.monotonic()
    rows, raw, meta = asyncio.run(run(args.rounds, args.turns, args.watchers))
    meta["seconds"] = round(time.monotonic() - started)
    print(render_text(rows))
    with contextlib.suppress(Exception):
        print(f"written: {write_results(meta, rows, raw, 'web')}")


if __name__ == "__main__":
    main()
