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
  ``chunks``: the path before ``startTurn``, for comparison;
* **the floors** (``bench.floor``, bare workflows on a worker process of their own): how long
  a client waits until an activity starts, where a turn's first model call would begin. The
  outside floor is a workflow the client starts itself; the contract floor is the same turn
  in the shape of the wire contract (an update on a conversation workflow runs it as a
  child), on a warm conversation and on a new one. Adding the direct call's own time to
  first token gives each floor's first token, a lower bound: relaying the token to the
  client is not counted.

Each warm and first turn is then laid out on one clock from its two histories (the
conversation's and the turn's) and the client's own marks: when the conversation accepted
the request, the turn workflow started, its first workflow task was picked up, the first
model step was scheduled, ``start`` answered and the first text delta arrived; and what the
turn cost the server in round trips (workflow tasks, activities, local activities,
search-attribute upserts, events). Server and client share this machine's clock.

Writes ``bench/results/ttft.md`` and ``.json``. Figures are medians; the machine is shared
and noisy, so compare the added milliseconds of the same run, not figures across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType

from bench import floor, ttft_streams
from bench.common import (
    ROOT,
    Row,
    WorkerProcess,
    event_epoch,
    loadavg,
    median,
    ms,
    render_text,
    run_meta,
    start_engine_worker,
    start_floor_worker,
    temporal_server,
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


PHASES = (
    ("accepted", "the conversation accepted the request (its workflow task done)"),
    ("turn_started", "the turn workflow started (the conversation's child)"),
    ("turn_task", "the turn's first workflow task picked up by the worker"),
    ("step_scheduled", "the first model step scheduled (begin_turn done, local)"),
    ("first_token", "the first text delta at the client (the step ran, the model streamed)"),
)
"""A turn's way to its first token, in order; each from the turn's start at the client.
``start`` answers on a branch of its own (``start_answered``), while the turn goes on."""

E = EventType

FLOORS = (
    (
        "floor",
        "outside floor: a workflow the client starts, its activity calling the model",
        "a bare workflow started by the client (bench.floor)",
    ),
    (
        "contract",
        "contract floor: the same as a child of a conversation's update",
        "an update on a warm bare conversation workflow runs it as a child workflow, the wire"
        " contract's shape (bench.floor)",
    ),
    (
        "contract_first",
        "contract floor, first turn: the same on a new conversation",
        "an update-with-start creates a bare conversation workflow, which runs it as a child"
        " workflow (bench.floor)",
    ),
)
"""Where a turn's first token could come from at the earliest, measured on bare workflows."""


async def turn_costs(client: Any, conversation: str, workflow_id: str, since: float) -> Any:
    """The turn's phases (epoch seconds) and server round trips, from the two histories.

    The conversation's part of a turn runs from the workflow task that accepted the request
    to the one that took in the turn's completion; that last one may still be under way
    when the client has the result, so it is waited for (up to 10 s)."""
    turn = [e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()]
    part: list[Any] = []
    for _ in range(100):
        events = [e async for e in client.get_workflow_handle(conversation).fetch_history_events()]
        part = _conversation_part(events, workflow_id, since)
        if part and part[-1].event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError(f"the conversation never took in {workflow_id}'s completion")

    def first(events: list[Any], kind: int) -> float:
        return next(event_epoch(e) for e in events if e.event_type == kind)

    def count(events: list[Any], kind: int) -> int:
        return sum(1 for e in events if e.event_type == kind)

    local = sum(
        1
        for e in [*part, *turn]
        if e.event_type == E.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    )
    phases = {
        "accepted": first(part, E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED),
        "turn_started": first(turn, E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
        "turn_task": first(turn, E.EVENT_TYPE_WORKFLOW_TASK_STARTED),
        "step_scheduled": first(turn, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
    }
    tasks = E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    costs = {
        "conversation workflow tasks": count(part, tasks),
        "turn workflow tasks": count(turn, tasks),
        "activities": count(turn, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
        "local activities": local,
        "search-attribute upserts": count(turn, E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES)
        + count(part, E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES),
        "history events (conversation + turn)": len(part) + len(turn),
    }
    return phases, costs


def _conversation_part(events: list[Any], workflow_id: str, since: float) -> list[Any]:
    """The conversation's events of one turn: from the workflow task scheduled for the
    request (the first at or after ``since``) to the task completed after the turn closed."""
    start = next(
        (
            i
            for i, e in enumerate(events)
            if e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED and event_epoch(e) >= since
        ),
        None,
    )
    if start is None:
        return []
    part: list[Any] = []
    closed = False
    for e in events[start:]:
        part.append(e)
        attrs = e.child_workflow_execution_completed_event_attributes
        if (
            e.event_type == E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED
            and attrs.workflow_execution.workflow_id == workflow_id
        ):
            closed = True
        elif closed and e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            break
    return part


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
        floor_queue = f"ttft-floor-{uuid.uuid4().hex[:6]}"
        floor_worker = await asyncio.to_thread(start_floor_worker, address, floor_queue, tmp)
        streams_queue = f"ttft-streams-{uuid.uuid4().hex[:6]}"
        streams_env = {
            **os.environ,
            "TEMPORAL_ADDRESS": address,
            "PYTHONPATH": str(ROOT),
            "ANTHROPIC_BASE_URL": llm.base_url,
            "ANTHROPIC_API_KEY": "bench-key",
        }
        streams_worker = await asyncio.to_thread(
            lambda: WorkerProcess(
                [sys.executable, "-m", "bench.ttft_streams", streams_queue],
                streams_env,
                tmp / "streams.log",
                "streams worker ready",
            )
        )
        await asyncio.to_thread(streams_worker.wait_ready)
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

        timelines: dict[str, list[dict[str, float]]] = {"warm": [], "first": []}
        costs: dict[str, dict[str, int]] = {}

        async def engine(conversation: str, kind: str) -> float:
            """Seconds to the first text delta; then the turn is awaited, untimed, and laid
            out from its histories (``timelines[kind]``, ``costs[kind]``)."""
            began, wall = time.perf_counter(), time.time()
            started = await turns.start(conversation, "hi")
            answered = time.time()
            assert started.turn_number is not None and started.workflow_id
            await first_text(turns.chunks(conversation, started.turn_number))
            took = time.perf_counter() - began
            await turns.result(conversation, started)  # not timed past the first token
            phases, costs[kind] = await turn_costs(client, conversation, started.workflow_id, wall)
            marks = {**phases, "start_answered": answered, "first_token": wall + took}
            timelines[kind].append({k: v - wall for k, v in marks.items()})
            return took

        floor_conversation = f"floor-{uuid.uuid4().hex[:6]}"
        await floor.send_stamped(client, floor_queue, floor_conversation, "warm")

        async def floor_outside() -> float:
            """Seconds from the client's start to the activity's start: a bare workflow."""
            wall = time.time()
            started = await floor.bare_stamped(client, floor_queue, f"floor-{uuid.uuid4().hex}")
            return started - wall

        async def floor_contract(conversation: str) -> float:
            """The same through an update on a floor conversation (a child workflow)."""
            wall = time.time()
            request = uuid.uuid4().hex
            started = await floor.send_stamped(client, floor_queue, conversation, request)
            return started - wall

        async def streams() -> None:
            """Temporal's workflow_streams: a workflow whose activity publishes the deltas."""
            workflow_id = f"streams-{uuid.uuid4().hex}"
            await ttft_streams.first_delta(client, streams_queue, workflow_id, MODEL)

        async def engine_polled() -> None:
            request_id = await turns.submit(polled, "hi")
            number = await turns.turn_number(polled, request_id)
            await first_text(turns.chunks(polled, number))

        samples: dict[str, list[float]] = {
            k: []
            for k in (
                "direct",
                "warm",
                "first",
                "polled",
                "streams",
                "floor",
                "contract",
                "contract_first",
            )
        }
        warmup = 2
        try:
            for i in range(warmup + rounds):
                figures = {
                    "direct": await timed(direct),
                    "warm": await engine(warm, "warm"),
                    "first": await engine(f"first-{uuid.uuid4().hex[:8]}", "first"),
                    "polled": await timed(engine_polled),
                    "streams": await timed(streams),
                    "floor": await floor_outside(),
                    "contract": await floor_contract(floor_conversation),
                    "contract_first": await floor_contract(f"floor-{uuid.uuid4().hex[:8]}"),
                }
                await turns.wait(polled, (await turns.state(polled)).recent[-1].request_id)
                if i >= warmup:
                    for key, value in figures.items():
                        samples[key].append(value)
        finally:
            await sdk.close()
            await turns.aclose()
            worker.stop()
            floor_worker.stop()
            streams_worker.stop()
            llm.stop()
    direct_s = median(samples["direct"])
    rows = [Row("ttft", "direct SDK call: first text delta", ms(direct_s), "the floor")]
    for key, label, target in (
        ("warm", "warm turn (start → chunks)", TARGET_WARM_MS),
        ("first", "first turn of a new conversation", TARGET_FIRST_MS),
        ("polled", "warm turn, submit + turn_number polling (before startTurn)", None),
        (
            "streams",
            "peer: Temporal's workflow_streams (a workflow started, its activity publishing)",
            None,
        ),
    ):
        added = (median(samples[key]) - direct_s) * 1000
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
    for key, label, what in FLOORS:
        start = median(samples[key])
        rows.append(
            Row(
                "ttft",
                label,
                ms(start + direct_s),
                f"+{start * 1000:.1f} ms over the direct call",
                None,
                "",
                "",
                note=f"{what}: its activity started {ms(start)} after the client's call; plus"
                f" the direct call's {ms(direct_s)} to the first token (a lower bound: the token's"
                " way back to the client is not counted)",
            )
        )
    for kind, turn in (("warm", "warm turn"), ("first", "first turn")):
        rows += timeline_rows(kind, turn, timelines[kind][warmup:], costs[kind])
    meta = run_meta(
        f"time to first token, {rounds} rounds after {warmup} warm-up rounds",
        f"python -m bench.ttft --rounds {rounds}",
        load_start,
        server,
    )
    raw = {"samples_s": samples, "timelines_s": timelines, "costs": costs}
    return rows, raw, meta


def timeline_rows(
    kind: str, turn: str, timelines: list[dict[str, float]], costs: dict[str, int]
) -> list[Row]:
    """A turn's phases (medians from its start at the client) and its server round trips."""
    rows: list[Row] = []
    previous: float | None = None
    for key, label in PHASES:
        at = median(t[key] for t in timelines)
        step = "" if previous is None else f"+{(at - previous) * 1000:.1f} ms after the line above"
        rows.append(Row(f"{kind} timeline", f"{turn}: {label}", ms(at), step))
        previous = at
    answered = median(t["start_answered"] for t in timelines)
    rows.append(
        Row(
            f"{kind} timeline",
            f"{turn}: `start` answered at the client",
            ms(answered),
            "meanwhile: the turn does not wait for it",
        )
    )
    counts = "; ".join(f"{what}: {n}" for what, n in costs.items())
    rows.append(Row(f"{kind} timeline", f"{turn}: what it costs the server", counts))
    return rows


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
