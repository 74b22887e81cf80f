"""Cancel latency and what it costs: ``python -m bench.cancel [--n N]``.

A turn's model step streams from the real Anthropic SDK against the local wire server
(``testkit/llm_server.py``), which sends a few events and then goes silent; after a random
0.5–2.5 s, ``cancelChat`` is signalled. Latency is the time from the signal to the SDK
hanging up on the server. Cost: heartbeat RPCs (the worker's Prometheus counter of
``RecordActivityTaskHeartbeat``) and worker CPU during one 10 s uncancelled step.

Two worker configurations, on the same embedded dev server (its configuration printed):
``TURNS_CANCEL_CHECK_MS=0`` (the SDK's throttling: one heartbeat per 0.8 × the 30 s
heartbeat timeout) and the default ``TURNS_CANCEL_CHECK_MS=500``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.common import (
    Row,
    cpu_seconds,
    free_port,
    median,
    ms,
    render_text,
    start_engine_worker,
    temporal_server,
)
from durable_turns.client import TurnsClient
from testkit.llm_server import LLMServer, Reply

KEY = "sk-ant-api03-BENCHKEY0123456789abcdef"
MODEL = "anthropic:claude-bench"


async def wait_until(ready: Any, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.01)


def heartbeat_rpcs(port: int) -> float:
    """The worker's count of heartbeat RPCs so far (Temporal runtime metrics)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("temporal_request") and "RecordActivityTaskHeartbeat" in line:
            if not line.split("{", 1)[0].endswith(("_bucket", "_sum", "_count")):
                total += float(line.rsplit(" ", 1)[1])
    return total


class Hangups:
    def __init__(self, server: LLMServer) -> None:
        self.ended: list[float] = []
        send = server._send

        async def timed(*args: Any) -> None:
            try:
                await send(*args)
            finally:
                self.ended.append(time.monotonic())

        server._send = timed  # type: ignore[method-assign]


async def measure(
    client: Client, address: str, server: LLMServer, tmp: Path, label: str, check_ms: str, n: int
) -> list[Row]:
    queue = f"bench-cancel-{check_ms}"
    port = free_port()
    worker = start_engine_worker(
        address,
        queue,
        tmp,
        ANTHROPIC_BASE_URL=server.base_url,
        ANTHROPIC_API_KEY=KEY,
        TURNS_CANCEL_CHECK_MS=check_ms,
        TURNS_PROMETHEUS_BIND=f"127.0.0.1:{port}",
    )
    turns = TurnsClient(client, queue)
    hangups = Hangups(server)
    latencies: list[float] = []
    try:
        for i in range(n):
            server.reset()
            hangups.ended.clear()
            server.push(Reply("anthropic/text_basic.sse", stall_after_events=5, stall_s=120))
            conversation = f"cancel-{check_ms}-{i}-{time.time_ns()}"
            request = await turns.submit(conversation, "Hello?", model=MODEL)
            await wait_until(lambda: bool(server.requests))
            await asyncio.sleep(random.uniform(0.5, 2.5))
            signalled = time.monotonic()
            await turns.cancel(conversation)
            result = await turns.wait(conversation, request)
            assert result.status == "aborted", result
            latencies.append(hangups.ended[0] - signalled)
        # cost: one uncancelled step that streams for 10 s
        server.reset()
        server.push(Reply("anthropic/text_basic.sse", stall_after_events=5, stall_s=10))
        before_rpcs, before_cpu = heartbeat_rpcs(port), cpu_seconds(worker.pid)
        started = time.monotonic()
        result = await turns.send(f"cost-{check_ms}-{time.time_ns()}", "Hello?", model=MODEL)
        elapsed = time.monotonic() - started
        rpcs = heartbeat_rpcs(port) - before_rpcs
        cpu = cpu_seconds(worker.pid) - before_cpu
        assert result.status == "completed", result
    finally:
        del server._send
        worker.stop()
    return [
        Row("cancel", f"{label}: latency median", ms(median(latencies)), note=f"n={n}"),
        Row("cancel", f"{label}: latency max", ms(max(latencies))),
        Row("cancel", f"{label}: heartbeat RPCs per streaming second", f"{rpcs / elapsed:.2f}"),
        Row("cancel", f"{label}: worker CPU per streaming second", ms(cpu / elapsed)),
    ]


async def main(n: int, baseline_n: int) -> None:
    with tempfile.TemporaryDirectory() as d, LLMServer() as server:
        tmp = Path(d)
        async with temporal_server(tmp) as (address, config):
            print(f"server: {config['version']!r}, dynamic config {config['dynamic_config']}")
            client = await Client.connect(address, data_converter=pydantic_data_converter)
            rows = await measure(client, address, server, tmp, "SDK throttle", "0", baseline_n)
            rows += await measure(client, address, server, tmp, "cancel_check 500ms", "500", n)
    print(render_text(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=10, help="cancels with the default setting")
    parser.add_argument("--baseline-n", type=int, default=4, help="cancels with SDK throttling")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.baseline_n))
