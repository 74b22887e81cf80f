"""``python -m bench.intake``: how long one workflow task of a conversation runs when the worst
burst of signals arrives at once, idle and with both cores loaded by other processes.

Temporal fails a workflow task whose activation runs past its deadlock detector (2 s), and then
refuses every request while the task retries: the target is a quarter of that, 500 ms, for the
longest activation of the burst. Each burst is sent while no worker runs, so the next worker's
first task receives all of it. An activation's time is what the worker's sandbox runner logs
for it (``TURNS_SLOW_ACTIVATION_MS=0`` logs every one): the workflow code's run, which is what
the detector times. The task's time off the history (``WorkflowTaskStarted`` to
``WorkflowTaskCompleted``, which adds fetching the history's pages and the SDK's decoding) is
in the notes. The reference is a quiet activation of the same run: one small request, no
burst.

The bursts:

- *costliest*: 60 requests just under the 256 KiB limit that each take the most to reject
  (7,300 valid messages, then one that is not), then 2,000 small malformed ones;
- *many*: 10,000 small malformed requests (the inbox's own bound).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

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
from tests.support.load import busy_cores

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


ACTIVATION = re.compile(r"slow activation: ([0-9.]+) ms \(ConversationWorkflow (\S+),")


def activation_times(log: Path, workflow_id: str) -> list[float]:
    """The conversation's activations, in seconds, as the worker logged them."""
    text = log.read_text(errors="replace")
    return [float(m[1]) / 1000 for m in ACTIVATION.finditer(text) if m[2] == workflow_id]


async def one_burst(
    client: Client, address: str, tmp: Path, name: str, loaded: bool
) -> dict[str, Any]:
    task_queue = f"intake-{uuid.uuid4().hex[:8]}"
    turns = TurnsClient(client, task_queue)
    conv = f"burst-{name}-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(CONVERSATION_WORKFLOW, id=conv, task_queue=task_queue)
    signals = BURSTS[name]
    sem = asyncio.Semaphore(64)

    async def send(arg: Any) -> None:
        async with sem:
            await handle.signal("submitMessages", arg)

    await asyncio.gather(*(send(a) for a in signals))
    worker = WorkerProcess(
        [sys.executable, str(ROOT / "worker.py")],
        engine_env(address, task_queue, tmp, TURNS_SLOW_ACTIVATION_MS="0"),
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
    activations = activation_times(worker.log_path, conv)
    return {
        "burst": name,
        "loaded": loaded,
        "signals": len(signals),
        "rejected": state.rejected_count,
        "tasks": len(times),
        "failed_tasks": failed,
        "max_task_s": max(times),
        "median_task_s": median(times),
        "activations": len(activations),
        "max_activation_s": max(activations),
        "median_activation_s": median(activations),
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
                            f"{burst} burst ({r['signals']} signals), {where}: longest activation",
                            ms(r["max_activation_s"]),
                            f"quiet {ms(quiet['max_activation_s'])}",
                            r["max_activation_s"] / max(quiet["max_activation_s"], 1e-6),
                            f"< {ms(TARGET_S)}",
                            judged(r["max_activation_s"], TARGET_S) if ok else "MISSED",
                            note=(
                                f"{r['activations']} activations (median"
                                f" {ms(r['median_activation_s'])}); {r['tasks']} tasks, the"
                                f" longest {ms(r['max_task_s'])} off the history,"
                                f" {r['failed_tasks']} failed; {r['rejected']} rejected;"
                                f" a request sent after it: {r['follow_up']} in"
                                f" {r['follow_up_s']:.1f} s"
                            ),
                        )
                    )
    meta = run_meta(
        "intake: the longest workflow activation of the worst signal bursts",
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
