"""Recovery at the defaults: SIGKILL or SIGTERM a worker mid-turn, time what the user sees next.

    python -m bench.recovery [--rounds-off 3] [--rounds 10] [--rounds-term 8]
                             [--rounds-tool 10] [--rounds-held 5] [--burst 100]

Two engine workers (``python worker.py``, every setting at its default: a 30 s heartbeat
timeout, the SQLite chunk stream) serve one task queue. Each round submits a turn whose one
model step streams 200 words, one per 50 ms; once a few chunks are out, the worker running
the step (its pid, from the workflow's pending activity) gets SIGKILL and a replacement
starts at once. Timed, from the kill: the first ``recovering`` event on the turn's stream,
and the next attempt's first new text (what the user sees move again: after the kept text
it re-publishes when it continues the lost attempt, which the user had seen already). Then the reply is
audited: completed, one assistant message, whole, once.

Liveness off (``TURNS_LIVENESS_MS=off``: the heartbeat timeout alone) is the baseline, in
the same run. Target (issue 36, item 1): kill → next chunk p50 ≤ 3 s, p95 ≤ 8 s.

A deploy's SIGTERM the same way (no replacement needed: the other worker is alive): timed
to the next attempt's first chunk and to the worker's exit, with the worker's hand-over of
its model steps (``Liveness.hand_over``) against liveness off (no hand-over: the step
streams on for the 10 s shutdown grace, then runs again from scratch). Also counted: the
characters the user had seen of the replaced attempt that the reply does not start with
(what the next attempt's reset takes back; it goes on from what was streamed), for SIGTERM
and SIGKILL, against all the characters seen (what a restart from scratch took back).
Target: SIGTERM → next chunk p95 ≤ 1 s; 0 characters rewound.

A SIGKILL half a second into a 3 s tool call (``testkit.tools.slow``), liveness on against
off: timed to the ``recovering`` event, to the call's next attempt starting (its history),
to its ``tool-result`` and to the next step's first chunk (these two include the tool's
re-run); audited: the call failed as ``WorkerLost``, its result once, the reply whole.

A SIGKILL inside the turn's workflow task: the last step's ``on_step_finish`` (``HoldFinish``)
holds finish_turn, a local activity, so the workflow task, for 3 s, and the worker is killed
then, as one killed just as a model step ends may be. No public API fails a dead worker's
workflow task: the turn waits its workflow task timeout. Timed to the ``recovering`` event
and to the turn's end, at the turns' ``TURN_TASK_TIMEOUT_S`` against Temporal's default
10 s (turns started directly with each, as a conversation starts its child). Last, how long
every workflow task of the run's other turns ran (Started → Completed), against that timeout,
and the same for a burst of 100 turns submitted at once to one worker process (a tool call,
then a streamed reply each): a loaded worker's tasks.
Writes ``bench/results/recovery.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client

from bench.common import (
    Row,
    WorkerProcess,
    event_epoch,
    loadavg,
    median,
    ms,
    percentile,
    render_text,
    run_meta,
    script,
    start_engine_worker,
    temporal_server,
    write_results,
)
from durable_turns.client import TurnsClient
from durable_turns.codec import data_converter_from_env
from durable_turns.contract import (
    TURN_TASK_TIMEOUT_S,
    TURN_WORKFLOW,
    TurnInput,
    TurnResult,
    turn_workflow_id,
)
from durable_turns.hooks import StepContext, TurnHooks
from durable_turns.messages import user_message
from durable_turns.streams import open_stream_backend
from durable_turns.streams.base import ChunkStreamBackend, StreamEvent, live_events

WORDS = " ".join(f"w{i}" for i in range(200))
PACED = [{"text": WORDS, "delay_ms": 50}]
LONG_WORDS = " ".join(f"w{i}" for i in range(400))
LONG = [{"text": LONG_WORDS, "delay_ms": 50}]
"""For SIGTERM: a step of 20 s, longer than the 10 s shutdown grace."""

TOOL_S = 3.0
TOOL = [
    {"tool_calls": [{"name": "slow", "input": {"seconds": TOOL_S}}]},
    {"text": "result: {tool_result}", "delay_ms": 20},
]
"""For a kill mid-tool: a tool call of 3 s (``testkit.tools.slow``), then a short reply."""
TOOL_REPLY = f"result: slept {TOOL_S}s"

HOLD_S = 3.0
SHORT_WORDS = " ".join(f"w{i}" for i in range(20))
SHORT = [{"text": SHORT_WORDS, "delay_ms": 20}]
"""For a kill in a workflow task: a short reply, then ``HoldFinish`` in finish_turn."""


BURST_WORDS = " ".join(f"w{i}" for i in range(100))
BURST = [
    {"tool_calls": [{"name": "slow", "input": {"seconds": 1}}]},
    {"text": BURST_WORDS, "delay_ms": 20},
]
"""The burst's turns: a 1 s tool call, then 100 words streamed in 2 s."""


class HoldFinish(TurnHooks):
    """The held rounds' hooks (``TURNS_HOOKS=bench.recovery:HoldFinish``): the last step's
    ``on_step_finish``, which runs in finish_turn, a local activity, so inside the turn's
    workflow task, marks ``BENCH_HOLD_DIR/<conversation>.<pid>`` and, the first time for its
    conversation, holds ``HOLD_S``: the worker killed then holds the turn's workflow task,
    as one killed just as a model step ends may."""

    async def on_step_finish(self, ctx: StepContext) -> None:
        folder = os.environ.get("BENCH_HOLD_DIR")
        if folder and ctx.finish_reason == "stop" and _mark(Path(folder), ctx.conversation_id):
            await asyncio.sleep(HOLD_S)


def _mark(folder: Path, conversation: str) -> bool:
    """Mark this worker's finish of ``conversation``; whether it is the first."""
    first = not _marks(folder, conversation)
    (folder / f"{conversation}.{os.getpid()}").touch()
    return first


def _marks(folder: Path, conversation: str) -> list[Path]:
    return list(folder.glob(f"{conversation}.*"))


def _has(kind: str) -> Callable[[list[StreamEvent]], bool]:
    return lambda events: any(e.type == kind for e in events)


async def _first_seen(
    streams: ChunkStreamBackend,
    workflow_id: str,
    killed: float,
    tests: dict[str, Callable[[list[StreamEvent]], bool]],
) -> dict[str, float | None]:
    """Read the turn's stream from the kill until the last of ``tests`` holds (at most
    120 s): when each first held, in seconds after the kill (None: never)."""
    seen: dict[str, float | None] = dict.fromkeys(tests)
    last = list(tests)[-1]
    while seen[last] is None and time.perf_counter() < killed + 120:
        events = await streams.read(workflow_id)
        now = time.perf_counter() - killed
        for name, test in tests.items():
            if seen[name] is None and test(events):
                seen[name] = now
        await asyncio.sleep(0.02)
    return seen


def _signal(workers: list[WorkerProcess], pid: int, sig: int) -> tuple[WorkerProcess, float]:
    """Send ``sig`` to the worker ``pid`` (then out of ``workers``): it, and when."""
    [victim] = [w for w in workers if w.pid == pid]
    victim.proc.send_signal(sig)
    killed = time.perf_counter()
    workers.remove(victim)
    return victim, killed


async def step_pid(client: Client, workflow_id: str, kind: str = "model_step") -> int:
    """The pid of the worker running the workflow's activity of type ``kind``."""
    handle = client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            for act in (await handle.describe()).raw_description.pending_activities:
                started = act.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                if act.activity_type.name == kind and started and act.last_worker_identity:
                    return int(act.last_worker_identity.split("@", 1)[0])
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the {kind} never started")


async def one_kill(
    client: Client,
    turns: TurnsClient,
    streams: ChunkStreamBackend,
    workers: list[WorkerProcess],
    model: str,
    sig: int,
    words: str,
) -> dict[str, Any]:
    conversation = f"recovery-{uuid.uuid4().hex[:8]}"
    await turns.submit(conversation, "count", model=model)
    workflow_id = turn_workflow_id(conversation, 1)
    pid = await step_pid(client, workflow_id)
    for _ in range(3000):  # a few chunks out: mid-stream
        if sum(e.type == "chunk" for e in await streams.read(workflow_id)) >= 5:
            break
        await asyncio.sleep(0.02)
    victim, killed = _signal(workers, pid, sig)
    recovering_s = chunk_s = exit_s = None
    seen = ""
    deadline = killed + 120
    while chunk_s is None and time.perf_counter() < deadline:
        events = await streams.read(workflow_id)
        now = time.perf_counter() - killed
        if recovering_s is None and any(e.type == "recovering" for e in events):
            recovering_s = now
        if exit_s is None and victim.proc.poll() is not None:
            exit_s = now
        fresh = [
            e.data.get("text", "") for e in events if e.type == "chunk" and (e.attempt or 1) > 1
        ]
        if not fresh:  # what the user has seen of the attempt the next one replaces
            seen = "".join(e.data.get("text", "") for e in events if e.type == "chunk")
        # the next attempt's first new text: after the kept text it re-publishes, if it does
        kept = bool(fresh) and bool(fresh[0]) and seen.startswith(fresh[0])
        if len(fresh) > (1 if kept else 0):
            chunk_s = now
        await asyncio.sleep(0.02)
    if exit_s is None:
        await asyncio.to_thread(victim.proc.wait, 60)
        exit_s = time.perf_counter() - killed
    victim.stop()
    result = await client.get_workflow_handle(workflow_id, result_type=TurnResult).result()
    text = "".join(
        e.data.get("text", "")
        for e in live_events(await streams.read(workflow_id))
        if e.type == "chunk"
    )
    return {
        "signal": signal.Signals(sig).name,
        "kill_to_chunk_s": chunk_s,
        "kill_to_recovering_s": recovering_s,
        "kill_to_exit_s": exit_s,
        "seen_chars": len(seen),
        # what the user had seen and the reply does not start with: taken back by the reset
        "rewound_chars": len(seen) - _common_prefix(seen, text),
        "completed": result.status == "completed",
        "whole": result.text.split() == words.split() and text.split() == words.split(),
    }


def _common_prefix(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` start with in common."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


async def one_tool_kill(
    client: Client,
    turns: TurnsClient,
    streams: ChunkStreamBackend,
    workers: list[WorkerProcess],
    model: str,
) -> dict[str, Any]:
    """SIGKILL the worker half a second into a 3 s tool call: timed from the kill to the
    ``recovering`` event, to the call's next attempt starting (its history), to its
    ``tool-result`` and to the next step's first chunk (these two include the tool's re-run)."""
    conversation = f"recovery-tool-{uuid.uuid4().hex[:8]}"
    await turns.submit(conversation, "go", model=model)
    workflow_id = turn_workflow_id(conversation, 1)
    pid = await step_pid(client, workflow_id, "tool_call")
    await asyncio.sleep(0.5)  # mid-tool
    killed_at = time.time()
    victim, killed = _signal(workers, pid, signal.SIGKILL)
    seen = await _first_seen(
        streams,
        workflow_id,
        killed,
        {
            "recovering": _has("recovering"),
            "result": _has("tool-result"),
            "chunk": lambda events: any(e.type == "chunk" and (e.step or 0) >= 1 for e in events),
        },
    )
    victim.stop()
    result = await client.get_workflow_handle(workflow_id, result_type=TurnResult).result()
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    starts = [
        event_epoch(e)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    rerun = [t - killed_at for t in starts if t > killed_at]
    lost = [
        e.activity_task_failed_event_attributes.failure.application_failure_info.type
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    timed_out = sum(
        e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT for e in history.events
    )
    results = [e for e in live_events(await streams.read(workflow_id)) if e.type == "tool-result"]
    return {
        "signal": "SIGKILL",
        "kill_to_recovering_s": seen["recovering"],
        "kill_to_rerun_s": rerun[0] if rerun else None,
        "kill_to_result_s": seen["result"],
        "kill_to_chunk_s": seen["chunk"],
        "failed": lost,
        "timed_out": timed_out,
        "completed": result.status == "completed",
        "whole": result.text == TOOL_REPLY and len(results) == 1,
    }


async def one_held_kill(
    client: Client,
    queue: str,
    streams: ChunkStreamBackend,
    workers: list[WorkerProcess],
    model: str,
    hold_dir: Path,
    task_timeout_s: float,
) -> dict[str, Any]:
    """SIGKILL the worker while the turn's workflow task runs finish_turn (``HoldFinish``):
    the task is held by a dead worker until its workflow task timeout. A turn started
    directly, as a conversation starts its child (``task_timeout_s``: its workflow task
    timeout). Timed from the kill to the ``recovering`` event and to the turn's end."""
    conversation = f"recovery-held-{uuid.uuid4().hex[:8]}"
    workflow_id = turn_workflow_id(conversation, 1)
    await client.start_workflow(
        TURN_WORKFLOW,
        TurnInput(
            conversation_id=conversation,
            request_id=conversation,
            new_messages=[user_message("count")],
            model=model,
        ),
        id=workflow_id,
        task_queue=queue,
        task_timeout=timedelta(seconds=task_timeout_s),
    )
    deadline = time.monotonic() + 60
    while not (marks := _marks(hold_dir, conversation)):
        if time.monotonic() > deadline:
            raise TimeoutError("finish_turn never ran")
        await asyncio.sleep(0.01)
    pid = int(marks[0].suffix[1:])
    victim, killed = _signal(workers, pid, signal.SIGKILL)
    seen = await _first_seen(
        streams,
        workflow_id,
        killed,
        {"recovering": _has("recovering"), "end": _has("turn-finish")},
    )
    victim.stop()
    result = await client.get_workflow_handle(workflow_id, result_type=TurnResult).result()
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    task_timeouts = sum(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT for e in history.events
    )
    return {
        "signal": "SIGKILL",
        "task_timeout_s": task_timeout_s,
        "kill_to_recovering_s": seen["recovering"],
        "kill_to_end_s": seen["end"],
        "workflow_task_timeouts": task_timeouts,
        "completed": result.status == "completed",
        "whole": result.text.split() == SHORT_WORDS.split(),
    }


async def burst(address: str, client: Client, tmp: Path, model: str, n: int) -> dict[str, Any]:
    """``n`` turns submitted at once to one worker process (each a tool call, then a streamed
    reply): the load under which its workflow tasks are timed (``task_times``)."""
    queue = f"recovery-burst-{uuid.uuid4().hex[:6]}"
    turns = TurnsClient(client, queue)
    worker = await asyncio.to_thread(
        start_engine_worker, address, queue, tmp, TURNS_TOOLS="testkit.tools"
    )
    try:
        started = time.perf_counter()
        ids = [f"recovery-burst-{uuid.uuid4().hex[:8]}" for _ in range(n)]
        requests = await asyncio.gather(*(turns.submit(c, "go", model=model) for c in ids))
        results = await asyncio.wait_for(
            asyncio.gather(
                *(turns.wait(c, r, poll_s=0.5) for c, r in zip(ids, requests, strict=True))
            ),
            900,
        )
        took = time.perf_counter() - started
    finally:
        worker.stop()
    whole = sum(r.status == "completed" and r.text.split() == BURST_WORDS.split() for r in results)
    return {"turns": n, "seconds": took, "whole": whole, "loadavg_end": loadavg()}


async def mode(
    address: str,
    client: Client,
    tmp: Path,
    model: tuple[str, str],
    rounds: int,
    sig: int,
    kind: str = "stream",
    task_timeout_s: float = 10.0,
    **env: str,
) -> list[dict[str, Any]]:
    """``rounds`` of ``sig`` to the worker running the turn's ``kind`` (``stream``: its
    model step; ``tool``: its tool call; ``held``: its workflow task); ``model``: its id and
    its reply."""
    queue = f"recovery-{uuid.uuid4().hex[:6]}"
    turns = TurnsClient(client, queue)
    streams = open_stream_backend(f"sqlite:///{tmp / 'data' / 'chunks.db'}")
    assert streams is not None
    hold_dir = tmp / f"hold-{queue}"
    hold_dir.mkdir()
    if kind == "tool":
        env = {"TURNS_TOOLS": "testkit.tools", **env}
    if kind == "held":
        env = {"TURNS_HOOKS": "bench.recovery:HoldFinish", "BENCH_HOLD_DIR": str(hold_dir), **env}

    async def spawn() -> WorkerProcess:
        return await asyncio.to_thread(start_engine_worker, address, queue, tmp, **env)

    workers = [await spawn(), await spawn()]
    runs = []
    try:
        await streams.open()
        for _ in range(rounds):
            if kind == "tool":
                runs.append(await one_tool_kill(client, turns, streams, workers, model[0]))
            elif kind == "held":
                runs.append(
                    await one_held_kill(
                        client, queue, streams, workers, model[0], hold_dir, task_timeout_s
                    )
                )
            else:
                runs.append(
                    await one_kill(client, turns, streams, workers, model[0], sig, model[1])
                )
            workers.append(await spawn())
    finally:
        await streams.close()
        for w in workers:
            w.stop()
    return runs


def stats(values: list[float]) -> str:
    return f"p50 {ms(median(values))}, p95 {ms(percentile(values, 95))}, max {ms(max(values))}"


async def run(
    rounds_off: int,
    rounds: int,
    rounds_term: int,
    rounds_tool: int,
    rounds_held: int,
    burst_n: int,
) -> tuple[list[Row], dict[str, Any], dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    load_start = loadavg()
    kill, term, off_env = signal.SIGKILL, signal.SIGTERM, {"TURNS_LIVENESS_MS": "off"}
    async with temporal_server(tmp) as (address, server):
        client = await Client.connect(address, data_converter=data_converter_from_env())
        paced = (script(tmp, "paced", PACED), WORDS)
        long = (script(tmp, "long", LONG), LONG_WORDS)
        tool = (script(tmp, "tool", TOOL), TOOL_REPLY)
        short = (script(tmp, "short", SHORT), SHORT_WORDS)
        off = await mode(address, client, tmp, paced, rounds_off, kill, **off_env)
        on = await mode(address, client, tmp, paced, rounds, kill, TURNS_LIVENESS_MS="1200")
        term_off = await mode(address, client, tmp, long, rounds_off, term, **off_env)
        term_on = await mode(address, client, tmp, long, rounds_term, term)
        tool_off = await mode(address, client, tmp, tool, rounds_off, kill, "tool", **off_env)
        tool_on = await mode(address, client, tmp, tool, rounds_tool, kill, "tool")
        held_10 = await mode(address, client, tmp, short, rounds_held, kill, "held", 10.0)
        held_on = await mode(
            address, client, tmp, short, rounds_held, kill, "held", TURN_TASK_TIMEOUT_S
        )
        burst_run = await burst(address, client, tmp, script(tmp, "burst", BURST), burst_n)
        tasks, local = await task_times(client)
        burst_tasks, burst_local = await task_times(client, "recovery-burst-")
    rows = []
    chunk_on, chunk_off = timed(on, "chunk"), timed(off, "chunk")
    rec_on, rec_off = timed(on, "recovering"), timed(off, "recovering")
    p50, p95 = median(chunk_on), percentile(chunk_on, 95)
    rows.append(Row("1", f"SIGKILL mid-stream → next chunk, liveness on ({len(on)} kills)",
                    stats(chunk_on), f"liveness off: {stats(chunk_off)}",
                    median(chunk_on) / median(chunk_off), "p50 ≤ 3 s, p95 ≤ 8 s",
                    "met" if p50 <= 3 and p95 <= 8 else "MISSED"))  # fmt: skip
    rows.append(Row("1", "SIGKILL → recovering event on the stream, liveness on",
                    stats(rec_on), f"liveness off: {stats(rec_off)}",
                    median(rec_on) / median(rec_off), "",
                    note="the engine knows at the watcher's detection, which publishes it first"))  # fmt: skip
    term_chunk, term_chunk_off = timed(term_on, "chunk"), timed(term_off, "chunk")
    rows.append(Row("1", f"SIGTERM mid-stream → next chunk, hand-over ({len(term_on)} deploys)",
                    stats(term_chunk), f"no hand-over (liveness off): {stats(term_chunk_off)}",
                    median(term_chunk) / median(term_chunk_off), "p95 ≤ 1 s",
                    "met" if percentile(term_chunk, 95) <= 1 else "MISSED",
                    note="the next attempt's first chunk: the hand-over (fail by task token),"
                    " a workflow task (no retry timer: patch handover), the new attempt's"
                    " start and its first token"))  # fmt: skip
    rows.append(Row("1", "SIGTERM → recovering event on the stream, hand-over",
                    stats(timed(term_on, "recovering")),
                    f"no hand-over: {stats(timed(term_off, 'recovering'))}",
                    median(timed(term_on, "recovering")) / median(timed(term_off, "recovering")),
                    ""))  # fmt: skip
    rows.append(Row("1", "SIGTERM → worker exit, hand-over",
                    stats(timed(term_on, "exit")), f"no hand-over: {stats(timed(term_off, 'exit'))}",
                    median(timed(term_on, "exit")) / median(timed(term_off, "exit")), ""))  # fmt: skip
    for label, runs in (
        ("SIGTERM, hand-over", term_on),
        ("SIGTERM, no hand-over", term_off),
        ("SIGKILL, liveness on", on),
        ("SIGKILL, liveness off", off),
    ):
        rewound = [float(r["rewound_chars"]) for r in runs]
        seen = [float(r["seen_chars"]) for r in runs]
        rows.append(Row("1", f"{label}: characters seen, then rewound by the next attempt",
                        f"p50 {median(rewound):.0f}, max {max(rewound):.0f}",
                        f"seen (what a restart from scratch rewinds): p50 {median(seen):.0f},"
                        f" max {max(seen):.0f}", median(rewound) / max(median(seen), 1), "0",
                        "MISSED" if max(rewound) else "met",
                        note="the next attempt goes on from what the lost one streamed (the demo"
                        " provider continues a prefill, as Anthropic does)"
                        if label.startswith("SIGTERM, hand") else ""))  # fmt: skip
    for what, label in (
        ("recovering", "recovering event"),
        ("rerun", "the call's next attempt starts"),
        ("result", f"its tool-result (re-run of {TOOL_S:.0f} s included)"),
        ("chunk", "the next step's first chunk"),
    ):
        on_s, off_s = timed(tool_on, what), timed(tool_off, what)
        first = what == "recovering"
        rows.append(Row("1", f"SIGKILL mid-tool → {label}, liveness on"
                        + (f" ({len(tool_on)} kills)" if first else ""),
                        stats(on_s), f"liveness off: {stats(off_s)}", median(on_s) / median(off_s),
                        "p50 ≤ 3 s, p95 ≤ 8 s" if what == "rerun" else "",
                        ("met" if median(on_s) <= 3 and percentile(on_s, 95) <= 8 else "MISSED")
                        if what == "rerun" else "",
                        note="the call fails as WorkerLost (counted as its heartbeat timeout) and"
                        " runs again on the other worker" if first else ""))  # fmt: skip
    lost = sum(r["failed"] == ["WorkerLost"] and not r["timed_out"] for r in tool_on)
    rows.append(Row("1", "SIGKILL mid-tool: recovered by liveness (ActivityTaskFailed WorkerLost)",
                    f"{lost} of {len(tool_on)}",
                    f"liveness off: {sum(r['timed_out'] for r in tool_off)} of {len(tool_off)}"
                    " heartbeat timeouts", None, f"{len(tool_on)}",
                    "met" if lost == len(tool_on) else "MISSED"))  # fmt: skip
    for what, label in (("recovering", "recovering event"), ("end", "turn-finish event")):
        on_s, base_s = timed(held_on, what), timed(held_10, what)
        rows.append(Row("3", f"SIGKILL in the turn's workflow task (finish_turn) → {label},"
                        f" task timeout {TURN_TASK_TIMEOUT_S:g} s"
                        + (f" ({len(held_on)} kills)" if what == "recovering" else ""),
                        stats(on_s), f"task timeout 10 s (Temporal's default): {stats(base_s)}",
                        median(on_s) / median(base_s),
                        "p50 ≤ 3 s, p95 ≤ 8 s" if what == "recovering" else "",
                        ("met" if median(on_s) <= 3 and percentile(on_s, 95) <= 8 else "MISSED")
                        if what == "recovering" else "",
                        note="no public API fails a dead worker's workflow task: it waits its"
                        " task timeout, then another worker replays the turn and runs finish_turn"
                        " again" if what == "recovering" else ""))  # fmt: skip
    timeout = TURN_TASK_TIMEOUT_S
    for label, plain, with_local in (
        ("every kill round's turn", tasks, local),
        (f"{burst_run['turns']} turns at once on one worker", burst_tasks, burst_local),
    ):
        rows.append(Row("3", f"workflow task run time (Started → Completed), {label}",
                        f"p50 {ms(median(plain))}, p95 {ms(percentile(plain, 95))},"
                        f" p99 {ms(percentile(plain, 99))}, max {ms(max(plain))}",
                        f"{len(plain)} tasks; with a local activity ({len(with_local)}):"
                        f" p50 {ms(median(with_local))}, max {ms(max(with_local))}", None,
                        f"max < {timeout / 2:g} s",
                        "met" if max(plain) < timeout / 2 else "MISSED",
                        note=f"against the turn's {timeout:g} s task timeout: a task longer"
                        " than it times out and runs again on another worker; a task whose local"
                        " activity (begin, finish turn) runs long is heartbeated by the SDK every"
                        f" {0.8 * timeout:.1f} s instead"))  # fmt: skip
    rows.append(Row("3", f"the burst: {burst_run['turns']} turns on one worker, whole",
                    f"{burst_run['whole']} of {burst_run['turns']}",
                    f"in {burst_run['seconds']:.1f} s; load average at its end"
                    f" {burst_run['loadavg_end']}", None, f"{burst_run['turns']}",
                    "met" if burst_run["whole"] == burst_run["turns"] else "MISSED"))  # fmt: skip
    every = off + on + term_off + term_on + tool_off + tool_on + held_10 + held_on
    bad = [r for r in every if not (r["completed"] and r["whole"])]
    rows.append(Row("1", "replies lost, duplicated or truncated", str(len(bad)),
                    f"of {len(every)}", None, "0", "met" if not bad else "MISSED"))  # fmt: skip
    meta = run_meta(
        f"recovery at the defaults: {rounds_off} kills, {rounds_off} SIGTERMs and"
        f" {rounds_off} tool kills with liveness off, {rounds} kills, {rounds_term} SIGTERMs"
        f" and {rounds_tool} tool kills with it on, {rounds_held} workflow-task kills at each"
        f" task timeout, a burst of {burst_n} turns",
        f"python -m bench.recovery --rounds-off {rounds_off} --rounds {rounds}"
        f" --rounds-term {rounds_term} --rounds-tool {rounds_tool} --rounds-held {rounds_held}"
        f" --burst {burst_n}",
        load_start,
        server,
    )
    raw = {
        "off": off,
        "on": on,
        "term_off": term_off,
        "term_on": term_on,
        "tool_off": tool_off,
        "tool_on": tool_on,
        "held_10": held_10,
        "held_on": held_on,
        "workflow_task_s": tasks,
        "workflow_task_local_s": local,
        "burst": burst_run,
        "burst_workflow_task_s": burst_tasks,
        "burst_workflow_task_local_s": burst_local,
    }
    return rows, raw, meta


async def task_times(client: Client, prefix: str | None = None) -> tuple[list[float], list[float]]:
    """How long each workflow task of this run's turns ran (WorkflowTaskStarted → Completed,
    seconds): those that ran no local activity, and those that did (begin, finish turn: their
    marker follows the task's completion; the SDK heartbeats such a task every 0.8 × its
    timeout, so it never times out). The turns whose conversation starts with ``prefix``;
    without it, every turn but the held rounds' (their hold is on purpose) and the burst's."""
    plain: list[float] = []
    local: list[float] = []
    async for wf in client.list_workflows(f"WorkflowType = '{TURN_WORKFLOW}'"):
        if prefix is not None and not wf.id.startswith(prefix):
            continue
        if prefix is None and wf.id.startswith(("recovery-held-", "recovery-burst-")):
            continue
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        started: dict[int, float] = {}
        ran: dict[int, float] = {}
        marked: set[int] = set()
        last = 0
        for e in history.events:
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                started[e.event_id] = event_epoch(e)
            elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                last = e.workflow_task_completed_event_attributes.started_event_id
                if last in started:
                    ran[last] = event_epoch(e) - started[last]
            elif e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                if e.marker_recorded_event_attributes.marker_name == "core_local_activity":
                    marked.add(last)
        for task, t in ran.items():
            (local if task in marked else plain).append(t)
    return plain, local


def timed(runs: list[dict[str, Any]], what: str) -> list[float]:
    """The rounds' times from the signal to ``what`` (chunk, recovering, exit)."""
    return [r[f"kill_to_{what}_s"] for r in runs if r[f"kill_to_{what}_s"] is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds-off", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--rounds-term", type=int, default=8)
    parser.add_argument("--rounds-tool", type=int, default=10)
    parser.add_argument("--rounds-held", type=int, default=5)
    parser.add_argument("--burst", type=int, default=100)
    args = parser.parse_args()
    started = time.monotonic()
    rows, raw, meta = asyncio.run(
        run(
            args.rounds_off,
            args.rounds,
            args.rounds_term,
            args.rounds_tool,
            args.rounds_held,
            args.burst,
        )
    )
    meta["seconds"] = round(time.monotonic() - started)
    print(render_text(rows))
    print(f"written: {write_results(meta, rows, raw, 'recovery')}")


if __name__ == "__main__":
    main()
