"""A real model's pace: a 3-step turn end to end, and its inter-token gaps at the client.

    python -m bench.pace [--rounds N]

The local server (``tests/llm_server.py``) replays Anthropic's recorded wire format at a
realistic pace: ``--first-token-s`` (0.4 s) before the first delta of each response, then
``--tokens-per-s`` (60) deltas a second. Each turn is 3 model steps: a ``get_weather`` tool
call, another, then a text answer. Rounds alternate:

* **direct SDK loop**: ``AsyncAnthropic.messages.stream`` three times, the tool called
  in-process between the steps (the floor);
* **durable-turns**: ``TurnsClient.start`` on a warm conversation, then ``chunks`` to the
  end of the turn, on an engine worker process (SQLite store and chunk stream).

End to end is from the client's call to the last event; the gaps are between consecutive
model deltas (text and tool input) as the client receives them, p50 and p99 over all turns.
Figures are medians; compare ratios of the same run. Writes ``bench/results/pace.md``/``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

from bench.common import (
    Row,
    judged,
    loadavg,
    median,
    ms,
    render_text,
    run_meta,
    start_engine_worker,
    temporal_server,
    write_results,
)
from bench.pace_tools import weather
from tests.llm_server import LLMServer, Reply

MODEL = "claude-sonnet-4-5"
TOOL_STEP, TEXT_STEP = "anthropic/tool_use.sse", "anthropic/text_basic.sse"
TARGET_RATIO = 1.02
DELTAS = ("text-delta", "tool-input-delta")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(rounds: int, first_token_s: float, tokens_per_s: float) -> Any:
    import anthropic
    from temporalio.client import Client

    from durable_turns.client import TurnsClient
    from durable_turns.codec import data_converter_from_env

    tmp = Path(tempfile.mkdtemp(prefix="bench-pace-"))
    load_start = loadavg()
    llm = LLMServer().start()
    pace = {"first_token_s": first_token_s, "tokens_per_s": tokens_per_s}

    def script() -> None:
        llm.reset()
        llm.push(Reply(TOOL_STEP, **pace), Reply(TOOL_STEP, **pace), Reply(TEXT_STEP, **pace))

    async with temporal_server(tmp) as (address, server):
        queue = f"pace-{uuid.uuid4().hex[:6]}"
        worker = start_engine_worker(
            address,
            queue,
            tmp,
            ANTHROPIC_BASE_URL=llm.base_url,
            ANTHROPIC_API_KEY="bench-key",
            TURNS_MODEL=f"anthropic:{MODEL}",
            TURNS_TOOLS="bench.pace_tools",
        )
        client = await Client.connect(address, data_converter=data_converter_from_env())
        turns = TurnsClient(client, queue, stream_url=f"sqlite:///{tmp / 'data' / 'chunks.db'}")
        sdk = anthropic.AsyncAnthropic(base_url=llm.base_url, api_key="bench-key", max_retries=0)
        conversation = f"pace-{uuid.uuid4().hex[:6]}"
        llm.default = Reply(TEXT_STEP)
        await turns.send(conversation, "hello")  # the conversation exists and is cached
        tools = [
            {
                "name": "get_weather",
                "description": "Current weather for a location",
                "input_schema": {
                    "type": "object",
                    "properties": {"location": {"type": "string"}},
                    "required": ["location"],
                },
            }
        ]

        async def direct() -> list[float]:
            """Marks (s from the call) of every delta, and the end as the last mark."""
            began, marks = time.perf_counter(), []
            messages: list[Any] = [{"role": "user", "content": "weather?"}]
            for _ in range(3):
                async with sdk.messages.stream(
                    model=MODEL,
                    max_tokens=256,
                    messages=messages,
                    tools=tools,  # type: ignore[arg-type]
                ) as stream:
                    async for event in stream:
                        if event.type == "content_block_delta":
                            marks.append(time.perf_counter() - began)
                    reply = await stream.get_final_message()
                calls = [b for b in reply.content if b.type == "tool_use"]
                if not calls:
                    break
                messages.append({"role": "assistant", "content": reply.content})
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": c.id,
                                "content": weather(str(c.input.get("location", ""))),  # type: ignore[union-attr]
                            }
                            for c in calls
                        ],
                    }
                )
            marks.append(time.perf_counter() - began)
            return marks

        async def engine() -> list[float]:
            began, marks = time.perf_counter(), []
            started = await turns.start(conversation, "weather?")
            assert started.turn_number is not None
            async for event in turns.chunks(conversation, started.turn_number):
                if event.type == "chunk" and event.data.get("type") in DELTAS:
                    marks.append(time.perf_counter() - began)
            marks.append(time.perf_counter() - began)
            result = await turns.result(conversation, started)
            if result.steps != 3:
                raise RuntimeError(f"the turn took {result.steps} steps, not 3: {result.status}")
            return marks

        samples: dict[str, list[list[float]]] = {"direct": [], "engine": []}
        warmup = 1
        try:
            for i in range(warmup + rounds):
                order = [("direct", direct), ("engine", engine)]
                for key, call in order if i % 2 == 0 else order[::-1]:
                    script()
                    marks = await call()
                    if i >= warmup:
                        samples[key].append(marks)
        finally:
            await sdk.close()
            await turns.aclose()
            worker.stop()
            llm.stop()

    def figures(key: str) -> tuple[float, float, float]:
        ends = [m[-1] for m in samples[key]]
        gaps = [b - a for m in samples[key] for a, b in itertools.pairwise(m[:-1])]
        return median(ends), percentile(gaps, 0.5), percentile(gaps, 0.99)

    d_end, d_p50, d_p99 = figures("direct")
    e_end, e_p50, e_p99 = figures("engine")
    pace_text = f"{first_token_s * 1000:.0f} ms to the first token, {tokens_per_s:g} tokens/s"
    rows = [
        Row("pace", "direct SDK loop: 3-step turn end to end", ms(d_end), "the floor"),
        Row(
            "pace",
            "durable-turns: 3-step turn end to end (start → the turn's last event)",
            ms(e_end),
            "the direct SDK loop",
            e_end / d_end,
            f"≤ {TARGET_RATIO}×",
            judged(e_end / d_end, TARGET_RATIO),
            note=f"the mock at {pace_text}; step 1 and 2 call get_weather, step 3 answers",
        ),
        Row("pace", "direct SDK loop: inter-token gap p50", ms(d_p50), "the floor"),
        Row("pace", "direct SDK loop: inter-token gap p99", ms(d_p99), "the floor"),
        Row(
            "pace",
            "durable-turns: inter-token gap p50",
            ms(e_p50),
            "the direct SDK loop",
            e_p50 / d_p50,
            f"≤ {TARGET_RATIO}×",
            judged(e_p50 / d_p50, TARGET_RATIO),
        ),
        Row(
            "pace",
            "durable-turns: inter-token gap p99",
            ms(e_p99),
            "the direct SDK loop",
            e_p99 / d_p99,
            f"≤ {TARGET_RATIO}×",
            judged(e_p99 / d_p99, TARGET_RATIO),
        ),
    ]
    meta = run_meta(
        f"a model's pace ({pace_text}), {rounds} alternating rounds after {warmup} warm-up",
        f"python -m bench.pace --rounds {rounds}",
        load_start,
        server,
    )
    return rows, {"marks_s": samples}, meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--first-token-s", type=float, default=0.4)
    parser.add_argument("--tokens-per-s", type=float, default=60.0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    started = time.monotonic()
    rows, raw, meta = asyncio.run(run(args.rounds, args.first_token_s, args.tokens_per_s))
    meta["seconds"] = round(time.monotonic() - started)
    print(render_text(rows))
    print(f"written: {write_results(meta, rows, raw, 'pace')}")


if __name__ == "__main__":
    main()
