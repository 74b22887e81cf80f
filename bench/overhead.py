"""1 · Per-step overhead: turn latency against two Temporal floors, same server, same process.

A turn of the engine (client ``send`` → result, on a warm conversation) with an instant demo
model, for 1 step and for 5 steps (4 calls of the ``get_weather`` tool), against:

* the **outside floor**: what a user could write instead of the engine: one workflow per
  turn, started directly, running only the model and tool activities (1 and 9 no-op
  activities); this is the figure to beat;
* the **same-shape floor**: an update-with-start on a conversation workflow whose child runs
  as many no-op activities as the engine's turn does (begin + steps + tool calls + finish:
  3 and 11), which isolates the engine's own code from the cost of its shape.

Engine and floor turns alternate, so machine noise falls on all three.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bench import floor
from bench.common import Bench, Row, judged, median, ms, script, tool_steps
from durable_turns.client import TurnsClient

TARGET = 1.3


def activities_of(steps: int) -> int:
    """The engine's activities on a turn's path: begin, model steps, tool calls, finish."""
    return 1 + steps + (steps - 1) + 1


def model_and_tool_activities(steps: int) -> int:
    """What the outside floor runs: the model steps and the tool calls, nothing else."""
    return steps + (steps - 1)


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def run(b: Bench) -> tuple[list[Row], dict[str, Any]]:
    turns = TurnsClient(b.client, b.engine_queue)
    samples, warmup = b.n(20, 4), 2
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for steps in (1, 5):
        model = script(b.tmp, f"overhead-{steps}", tool_steps(steps))
        conv = f"overhead-{steps}-{uuid.uuid4().hex[:6]}"
        floor_conv = f"floor-{conv}"
        n = activities_of(steps)
        outside_n = model_and_tool_activities(steps)

        async def engine(model: str = model, conv: str = conv) -> None:
            result = await turns.send(conv, "What is the weather in Oslo?", model=model)
            assert result.status == "completed", result

        async def bare(floor_conv: str = floor_conv, n: int = n) -> None:
            await floor.send(b.client, b.floor_queue, floor_conv, uuid.uuid4().hex, n)

        async def outside(outside_n: int = outside_n) -> None:
            await floor.bare(b.client, b.floor_queue, f"outside-{uuid.uuid4().hex}", outside_n)

        engine_s, floor_s, outside_s = [], [], []
        for i in range(warmup + samples):
            e, f, o = await timed(engine), await timed(bare), await timed(outside)
            if i >= warmup:
                engine_s.append(e)
                floor_s.append(f)
                outside_s.append(o)
        ratio = median(engine_s) / median(floor_s)
        raw[f"{steps}_step"] = {
            "engine_s": engine_s,
            "floor_s": floor_s,
            "floor_activities": n,
            "outside_s": outside_s,
            "outside_activities": outside_n,
        }
        rows.append(
            Row(
                "1",
                f"turn latency, {steps} step{'s' if steps > 1 else ''}, against the outside floor",
                ms(median(engine_s)),
                f"one workflow per turn {ms(median(outside_s))} ({outside_n} no-op activities)",
                median(engine_s) / median(outside_s),
                note="what a user could write instead of the engine",
            )
        )
        rows.append(
            Row(
                "1",
                f"turn latency, {steps} step{'s' if steps > 1 else ''}"
                + (f" ({steps - 1} tool calls)" if steps > 1 else ""),
                ms(median(engine_s)),
                f"floor {ms(median(floor_s))} ({n} no-op activities)",
                ratio,
                f"≤ {TARGET}× floor",
                judged(ratio, TARGET),
            )
        )
    per_step = (median(raw["5_step"]["engine_s"]) - median(raw["1_step"]["engine_s"])) / 4
    floor_step = (median(raw["5_step"]["floor_s"]) - median(raw["1_step"]["floor_s"])) / 4
    rows.append(
        Row(
            "1",
            "added latency per extra step (model step + tool call)",
            ms(per_step),
            f"floor {ms(floor_step)} (2 no-op activities)",
            per_step / floor_step,
            note=f"{samples} samples per figure after {warmup} warm-up turns, engine and floor"
            " alternating; in-process workers; latency = client send → result",
        )
    )
    return rows, raw
