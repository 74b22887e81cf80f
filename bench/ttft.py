"""Time to first token, as a client sees it, against the provider's SDK called directly.

    python -m bench.ttft [--rounds N]

One local server replays Anthropic's recorded wire format (``tests/llm_server.py``) to the
real ``anthropic`` SDK; an engine worker process (``python worker.py``, SQLite store and
chunk stream) points its ``anthropic:`` provider at the same server. Rounds interleave:

* **direct SDK**: ``AsyncAnthropic.messages.stream`` → the first text delta (the floor);
* **warm turn**: ``TurnsClient.start`` on a conversation that already has turns, then
  ``chunks`` → the first ``text-delta`` (the path ``turns chat`` takes);
* **first turn**: the same on a new conversation (its workflow starts too);
* **warm turn, polling path**: ``submit`` + ``turn_number`` (which polls ``state``) +
  ``chunks``: the path before ``startTurn``, for comparison.

Writes ``bench/results/ttft.md`` and ``.json``. Figures are medians; the machine is shared
and noisy, so compare the added milliseconds of the same run, not figures across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.common import (
    Row,
    code_version,
    loadavg,
    machine_info,
    median,
    ms,
    now_iso,
    render_text,
    start_engine_worker,
    temporal_server,
    versions,
    write_results,
)
from tests.llm_server import LLMServer, Reply

FIXTURE = "anthropic/text_basic.sse"
MODEL = "claude-sonnet-4-5"  # any name: the local server answers every one
TARGET_WARM_MS = 30.0
TARGET_FIRST_MS = 50.0


async def first_text(events: Any) -> None:
    """Consume a chunk stream until its first text delta."""
    async for event in events:
        if event.type == "chunk" and event.data.get("type") == "text-delta":
            return
    raise RuntimeError("the turn finished without a text delta")


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def run(rounds: int) -> tuple[list[Row], dict[str, Any], dict[str, Any]]:
    import anthropic
    from temporalio.client import Client

    from durable_turns.client import TurnsClient
    from durable_turns.codec import data_converter_from_env

    tmp = Path(tempfile.mkdtemp(prefix="bench-ttft-"))
    load_start = loadavg()
    llm = LLMServer().start()
    llm.default = Reply(FIXTURE)
    async with temporal_server(tmp) as (address, server):
        queue = f"ttft-{uuid.uuid4().hex[:6]}"
        worker = start_engine_worker(
            address,
            queue,
            tmp,
            ANTHROPIC_BASE_URL=llm.base_url,
            ANTHROPIC_API_KEY="bench-key",
            TURNS_MODEL=f"anthropic:{MODEL}",
        )
        client = await Client.connect(address, data_converter=data_converter_from_env())
        turns = TurnsClient(client, queue, stream_url=f"sqlite:///{tmp / 'data' / 'chunks.db'}")
        sdk = anthropic.AsyncAnthropic(base_url=llm.base_url, api_key="bench-key", max_retries=0)
        warm = f"warm-{uuid.uuid4().hex[:6]}"
        polled = f"polled-{uuid.uuid4().hex[:6]}"
        for conversation in (warm, polled):
            await turns.send(conversation, "hello")  # the conversation exists and is cached

        async def direct() -> None:
            async with sdk.messages.stream(
                model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
            ) as stream:
                async for event in stream:
                    if event.type == "content_block_delta" and event.delta.type == "text_delta":
                        return

        async def engine(conversation: str) -> float:
            """Seconds to the first text delta; then the turn is awaited, untimed."""
            began = time.perf_counter()
            started = await turns.start(conversation, "hi")
            assert started.turn_number is not None
            await first_text(turns.chunks(conversation, started.turn_number))
            took = time.perf_counter() - began
            await turns.result(conversation, started)  # not timed past the first token
            return took

        async def engine_polled() -> None:
            request_id = await turns.submit(polled, "hi")
            number = await turns.turn_number(polled, request_id)
            await first_text(turns.chunks(polled, number))

        samples: dict[str, list[float]] = {k: [] for k in ("direct", "warm", "first", "polled")}
        warmup = 2
        try:
            for i in range(warmup + rounds):
                figures = {
                    "direct": await timed(direct),
                    "warm": await engine(warm),
                    "first": await engine(f"first-{uuid.uuid4().hex[:8]}"),
                    "polled": await timed(engine_polled),
                }
                await turns.wait(polled, (await turns.state(polled)).recent[-1].request_id)
                if i >= warmup:
                    for key, value in figures.items():
                        samples[key].append(value)
        finally:
            await sdk.close()
            await turns.aclose()
            worker.stop()
            llm.stop()
    floor = median(samples["direct"])
    rows = [Row("ttft", "direct SDK call: first text delta", ms(floor), "the floor")]
    for key, label, target in (
        ("warm", "warm turn (start → chunks)", TARGET_WARM_MS),
        ("first", "first turn of a new conversation", TARGET_FIRST_MS),
        ("polled", "warm turn, submit + turn_number polling (before startTurn)", None),
    ):
        added = (median(samples[key]) - floor) * 1000
        met = "" if target is None else ("met" if added <= target else "MISSED")
        rows.append(
            Row(
                "ttft",
                label,
                ms(median(samples[key])),
                f"+{added:.1f} ms over the direct call",
                None,
                f"≤ +{target:.0f} ms" if target is not None else "",
                met,
            )
        )
    machine = machine_info()
    machine["loadavg_start"], machine["loadavg_end"] = load_start, loadavg()
    meta = {
        "mode": f"time to first token, {rounds} rounds after {warmup} warm-up rounds",
        "date": now_iso(),
        "command": f"python -m bench.ttft --rounds {rounds}",
        "code": code_version(),
        "python": platform.python_version(),
        "machine": machine,
        "versions": versions(),
        "server": {**server, "data_dir": "a temporary folder"},
        "seconds": 0,
    }
    return rows, {"samples_s": samples}, meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # the SDK's model notices
    started = time.monotonic()
    rows, raw, meta = asyncio.run(run(args.rounds))
    meta["seconds"] = round(time.monotonic() - started)
    print(render_text(rows))
    with contextlib.suppress(Exception):
        print(f"written: {write_results(meta, rows, raw, 'ttft')}")


if __name__ == "__main__":
    main()
