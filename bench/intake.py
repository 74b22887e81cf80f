"""``python -m bench.intake``: how long a workflow task of a conversation runs when the worst
burst of signals arrives at once, idle and with both cores loaded by other processes.

Temporal fails a workflow task whose activation runs past its deadlock detector (2 s), and then
refuses every request while the task retries: the target is a quarter of that, 500 ms, for the
longest activation of the burst. Each burst is sent while no worker runs, so the next worker's
first task receives all of it (as many as the server took: ``history.maximumSignalsPerExecution``,
2,500 on the dev server, the rest refused to their senders). A task's time is taken off the
history (``WorkflowTaskStarted`` to ``WorkflowTaskCompleted``: the activations the task held,
fetching the history's pages and the SDK's decoding); the engine runs the SDK's stock runners,
which time no activation, so what the detector would fail shows as a failed task. The
reference is a quiet task of the same kind: one small request, no burst.

The bursts:

- *costliest*: 60 requests just under the 256 KiB limit that each take the most to reject
  (7,300 valid messages, then one that is not), then 2,000 small malformed ones;
- *many*: 10,000 small malformed requests (the inbox's own bound).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from bench.common import (
    ROOT,
    Row,
    WorkerProcess,
    engine_env,
    event_epoch,
    judged,
    loadavg,
    median,
    ms,
    render_text,
    run_meta,
    temporal_server,
    write_results,
)
from durable_turns.client import TurnsClient
from durable_turns.contract import CONVERSATION_WORKFLOW
from testkit.load import busy_cores

DETECTOR_S = 2.0
TARGET_S = DETECTOR_S / 4


def costliest(n: int) -> dict[str, Any]:
    messages: list[Any] = [{"role": "user", "content": f"m{i}"} for i in range(7_300)]
    messages.append({"role": "nobody", "content": n})
    return {"messages": messages}


BURSTS: dict[str, list[Any]] = {
    "costliest": [costliest(i) for i in range(60)]
    + [{"messages": "nope", "n": i} for i in range(2000)],
    "many": [{"messages": "nope", "n": i} for i in range(10_000)],
    "quiet": [],
}


async def task_times(handle: WorkflowHandle[Any, Any]) -> tuple[list[float], int]:
    """Each workflow task's run time (started → completed), and how many failed."""
    started: dict[int, float] = {}
    times, failed = [], 0
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            started[event.event_id] = event_epoch(event)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            began = started.get(event.workflow_task_completed_event_attributes.started_event_id)
            if began is not None:
                times.append(event_epoch(event) - began)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failed += 1
    return times, failed


async def one_burst(
    client: Client, address: str, tmp: Path, name: str, loaded: bool
) -> dict[str, Any]:
    task_queue = f"intake-{uuid.uuid4().hex[:8]}"
    turns = TurnsClient(client, task_queue)
    conv = f"burst-{name}-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(CONVERSATION_WORKFLOW, id=conv, task_queue=task_queue)
    signals = BURSTS[name]
    sem = asyncio.Semaphore(64)
    refused = 0

    async def send(arg: Any) -> None:
        nonlocal refused
        async with sem:
            try:
                await handle.signal("submitMessages", arg)
            except RPCError:  # past the server's signals per run
                refused += 1

    await asyncio.gather(*(send(a) for a in signals))
    worker = WorkerProcess(
        [sys.executable, str(ROOT / "worker.py")],
        engine_env(address, task_queue, tmp),
        tmp / f"worker-{name}-{loaded}.log",
        "worker ready",
    )
    load = busy_cores() if loaded else contextlib.nullcontext()
    try:
        with load:
            worker.wait_ready()
            t0 = time.monotonic()
            result = await asyncio.wait_for(
                turns.send(conv, "still there?", model="demo:echo"), 300
            )
            answered = time.monotonic() - t0
        state = await turns.state(conv)
        times, failed = await task_times(handle)
    finally:
        await handle.terminate()
        worker.stop()
    return {
        "burst": name,
        "loaded": loaded,
        "signals": len(signals),
        "refused_by_server": refused,
        "rejected": state.rejected_count,
        "tasks": len(times),
        "failed_tasks": failed,
        "max_task_s": max(times),
        "median_task_s": median(times),
        "follow_up_s": answered,
        "follow_up": result.status,
    }


async def run(bursts: list[str]) -> tuple[list[Row], dict[str, Any], dict[str, Any]]:
    load_start = loadavg()
    raw: dict[str, Any] = {"runs": []}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-intake-") as name:
        tmp = Path(name)
        async with temporal_server(tmp) as (address, server):
            client = await Client.connect(address, data_converter=pydantic_data_converter)
            for loaded in (False, True):
                quiet = await one_burst(client, address, tmp, "quiet", loaded)
                raw["runs"].append(quiet)
                where = "both cores loaded" if loaded else "idle"
                for burst in bursts:
                    r = await one_burst(client, address, tmp, burst, loaded)
                    raw["runs"].append(r)
                    ok = r["failed_tasks"] == 0 and r["follow_up"] == "completed"
                    rows.append(
                        Row(
                            "1" if not loaded else "2",
                            f"{burst} burst ({r['signals']} signals), {where}: longest task",
                            ms(r["max_task_s"]),
                            f"quiet {ms(quiet['max_task_s'])}",
                            r["max_task_s"] / max(quiet["max_task_s"], 1e-6),
                            f"< {ms(TARGET_S)}",
                            judged(r["max_task_s"], TARGET_S) if ok else "MISSED",
                            note=(
                                f"{r['tasks']} tasks (median {ms(r['median_task_s'])}),"
                                f" {r['failed_tasks']} failed; {r['refused_by_server']} refused"
                                f" by the server; {r['rejected']} rejected by the conversation;"
                                f" a request sent after it: {r['follow_up']} in"
                                f" {r['follow_up_s']:.1f} s"
                            ),
                        )
                    )
    meta = run_meta(
        "intake: the longest workflow task of the worst signal bursts",
        "python -m bench.intake",
        load_start,
        server,
    )
    return rows, raw, meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bursts", nargs="*", default=["costliest", "many"])
    args = parser.parse_args()
    started = time.monotonic()
    rows, raw, meta = asyncio.run(run(args.bursts))
    meta["seconds"] = round(time.monotonic() - started)
    print(render_text(rows))
    print(f"written: {write_results(meta, rows, raw, 'intake')}")


if __name__ == "__main__":
    main()
