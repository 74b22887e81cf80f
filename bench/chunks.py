"""5 · The chunk path: chunks per second through ``activities.streaming.consume()``.

Synthetic async generators of ``TextDelta`` parts (built before the clock starts) are driven
through ``consume()``, one generator per model step:

* steps of 4,000 chunks (a long answer) with no ``on_chunk`` (what the engine does when no
  hook overrides it), with a no-op ``on_chunk`` coroutine (the target: ≥ 20,000 chunks/s),
  and with the engine's own dispatch (``Lifecycle.chunk_handler`` to a ``TurnHooks``
  subclass whose ``on_chunk`` does nothing: a ``ChunkContext`` per chunk);
* one step of 100,000 chunks with the no-op ``on_chunk`` (does the cost per chunk stay flat
  as a step grows?);
* inside a real activity on a real worker with ``activity.heartbeat`` as the heartbeat,
  throttled as the engine does it and on every chunk (what the throttle saves);
* end to end: one long ``model_step`` of the demo model through the engine's worker.

CPU seconds per 1,000 chunks are ``time.process_time`` deltas of the process that ran them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from temporalio import activity

from bench.common import Bench, Row, activity_spans, median, script
from durable_turns.activities.streaming import consume
from durable_turns.client import TurnsClient
from durable_turns.config import Settings
from durable_turns.messages import StreamPart, TextDelta

TARGET = 20_000
ENGINE_BEAT_EVERY = max(Settings().heartbeat_timeout_s / 4, 0.05)  # ActivityDeps.beat_every
STEP = 4_000
LONG_STEP = 100_000


def stream_backend() -> str:
    url = getattr(Settings(), "resolved_chunk_stream_url", None)
    return str(url).split(":", 1)[0] if url else "none"


def parts(n: int) -> list[StreamPart]:
    return [TextDelta(text=f"w{i % 100} ") for i in range(n)]


async def stream(items: list[StreamPart]) -> AsyncIterator[StreamPart]:
    for item in items:
        yield item


def engine_on_chunk() -> Any:
    """The engine's per-chunk dispatch (``Lifecycle.chunk_handler``) to a no-op hook."""
    from durable_turns.activities.lifecycle import Lifecycle
    from durable_turns.hooks import TurnHooks
    from durable_turns.hooks.types import ChunkContext

    class NoopChunkHooks(TurnHooks):
        async def on_chunk(self, ctx: ChunkContext) -> None:
            return None

    return Lifecycle(NoopChunkHooks()).chunk_handler(step=0, request_id="bench")


async def _noop(chunk: StreamPart) -> None:
    return None


async def drive(
    total: int, step: int, mode: str, heartbeat: Any = None, beat_every: float = ENGINE_BEAT_EVERY
) -> dict[str, float]:
    """``total`` chunks through ``consume()``, ``step`` chunks per model step."""
    steps = [parts(step) for _ in range(total // step)]
    on_chunk = {"none": None, "noop": _noop, "engine": engine_on_chunk()}[mode]
    beats = [0]

    def count(*_: Any) -> None:
        beats[0] += 1

    wall, cpu = time.perf_counter(), time.process_time()
    for items in steps:
        snap = await consume(
            stream(items),
            stall_timeout_ms=0,
            heartbeat=heartbeat or count,
            heartbeat_every_s=beat_every,
            on_chunk=on_chunk,
        )
        assert snap.chunks == step
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    n = step * len(steps)
    return {"chunks_per_s": n / wall, "cpu_s_per_1000": cpu / n * 1000, "chunks": n}


@activity.defn(name="bench_consume")
async def consume_in_activity(arg: dict[str, Any]) -> dict[str, float]:
    """``consume()`` inside a real activity, heartbeating through ``activity.heartbeat``."""
    return await drive(int(arg["n"]), STEP, "noop", activity.heartbeat, float(arg["beat_every"]))


ACTIVITIES = [consume_in_activity]


def _row(label: str, results: list[dict[str, float]], target: bool, note: str = "") -> Row:
    rate = median(r["chunks_per_s"] for r in results)
    cpu = median(r["cpu_s_per_1000"] for r in results)
    return Row(
        "5",
        label,
        f"{rate:,.0f} chunks/s",
        f"{cpu * 1000:.1f} ms CPU per 1,000 chunks",
        target=f"≥ {TARGET:,} chunks/s" if target else "",
        status=("met" if rate >= TARGET else "MISSED") if target else "",
        note=note,
    )


async def run_micro(quick: bool) -> tuple[list[Row], dict[str, Any]]:
    """No Temporal: the per-chunk path alone."""
    total, repeats = (40_000, 3) if quick else (200_000, 7)
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for label, mode, target in (
        ("consume(), no on_chunk hook", "none", False),
        ("consume(), no-op on_chunk", "noop", True),
        ("consume(), engine on_chunk dispatch (no-op hook)", "engine", True),
    ):
        raw[mode] = [await drive(total, STEP, mode) for _ in range(repeats)]
        rows.append(_row(f"{label}, {STEP:,}-chunk steps", raw[mode], target))
    rows[0].note = (
        f"{total:,} TextDelta chunks per run × {repeats} runs;"
        " a heartbeat stub; a synthetic async generator"
    )
    long_total = LONG_STEP if quick else 2 * LONG_STEP
    raw["long_step"] = [
        await drive(long_total, LONG_STEP, "noop") for _ in range(max(repeats // 2, 1))
    ]
    short = median(r["chunks_per_s"] for r in raw["noop"])
    long = median(r["chunks_per_s"] for r in raw["long_step"])
    rows.append(
        _row(
            f"consume(), no-op on_chunk, one {LONG_STEP:,}-chunk step",
            raw["long_step"],
            True,
            note=f"{short / long:.1f}× slower per chunk than {STEP:,}-chunk steps: the cost"
            " per chunk grows with the step's text so far (accumulate() appends to the"
            " step's TextPart with `last.text += text`, which copies the text on every chunk)"
            if short / long > 1.5
            else "flat: the cost per chunk does not grow with the step",
        )
    )
    return rows, raw


async def run_worker(b: Bench) -> tuple[list[Row], dict[str, Any]]:
    """Through a real worker: activity.heartbeat's cost, and one long model_step end to end."""
    n, repeats = (20_000, 2) if b.quick else (100_000, 5)
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    variants = (
        (f"throttled ({ENGINE_BEAT_EVERY:g} s, the engine's)", "throttled", ENGINE_BEAT_EVERY),
        ("on every chunk", "every_chunk", 0.0),
    )
    for label, key, beat_every in variants:
        raw[key] = [
            await b.client.execute_workflow(
                "FloorCall",
                args=["bench_consume", {"n": n, "beat_every": beat_every}],
                id=f"bench-consume-{uuid.uuid4().hex[:8]}",
                task_queue=b.floor_queue,
                result_type=dict,
            )
            for _ in range(repeats)
        ]
        rows.append(
            _row(
                f"consume() in a real activity, no-op on_chunk, activity.heartbeat {label}",
                raw[key],
                key == "throttled",
            )
        )
    per_beat = 1 / median(r["chunks_per_s"] for r in raw["every_chunk"]) - 1 / median(
        r["chunks_per_s"] for r in raw["throttled"]
    )
    rows[-1].note = f"one activity.heartbeat() call costs ≈ {per_beat * 1e6:.1f} µs here"

    # End to end: a long demo stream through model_step (provider → consume → persist).
    words = b.n(20_000, 5_000)
    model = script(b.tmp, "chunks-e2e", [{"text": " ".join(f"w{i % 100}" for i in range(words))}])
    turns = TurnsClient(b.client, b.engine_queue)
    rates = []
    for _ in range(b.n(3, 1)):
        result = await turns.send(f"chunks-{uuid.uuid4().hex[:8]}", "go", model=model)
        assert result.status == "completed", result
        history = await b.client.get_workflow_handle(result.workflow_id).fetch_history()
        [span] = activity_spans(history, "model_step")
        rates.append(words / (span["closed"] - span["started"]).total_seconds())
    raw["model_step_e2e"] = {"chunks": words, "chunks_per_s": rates}
    rows.append(
        Row(
            "5",
            f"model_step end to end, one {words:,}-chunk step (demo provider → consume → store)",
            f"{median(rates):,.0f} chunks/s",
            note="activity Started → Completed in the turn's history: the demo provider building"
            " and yielding each chunk, consume(), the live chunk stream (the worker's default:"
            f" {stream_backend()}) and storing the step",
        )
    )
    return rows, raw
