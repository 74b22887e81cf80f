"""Where a burst of turn starts spends its time: what starting one turn costs the worker and
the Temporal server, against the contract floor and the direct SDK loop, and where each turn
of a burst waits.

    python -m bench.starts [--bursts 20,80,160] [--rounds 3] [--tokens 5] [--core 0]

The layout is ``bench.capacity``'s: each system's process pinned to ``--core``, one after the
other; the dev server, the mock and this process on the other cores. The mock answers each
request's first token after 400 ms, then ``--tokens`` more at 60 a second: short replies, so
that what a turn costs is its start and its end, not its tokens. Three systems:

* **durable-turns**: ``python worker.py`` at the defaults; a turn is ``TurnsClient.start``,
  then its chunk stream read to its ``turn-finish``, then its result;
* **the contract floor**: bare Temporal in the wire contract's shape
  (``bench.pace_floor``: an update-with-start on a conversation workflow runs the turn as a
  child workflow, whose activity makes the direct SDK call and relays each delta over a TCP
  connection to this process; no store, no hooks, no chunk stream), its workflows unsandboxed
  as the engine's. The shape is a decided cost of the contract, so this is what the engine
  adds to: the turns of a burst wait at least as long here;
* **the direct SDK loop** (``bench.capacity``'s floor): N ``AsyncAnthropic`` streams.

A **burst** is N turns, each the next turn of a warm conversation of its own, requested at
random moments within one second (N streams, for the direct loop). Per burst:

* **CPU per turn**: the pinned process's, the dev server's and this process's CPU over the
  burst (``/proc``), divided by N;
* **where a turn waited**, from the turn workflow's history (the server's clock) and this
  process's clock (the same machine's):
  - *to its workflow*: request sent → the turn's workflow started (the conversation's
    update task and the child workflow's start);
  - *to its first task*: the turn's workflow started → its first workflow task started
    (the task queue: waiting for the worker to poll);
  - *first task*: that task, started → completed (the ``begin_turn`` local activity, then
    the model step scheduled, which an eager dispatch starts at once);
  - *model step → first token*: the model step's start → its first token read, less the
    mock's 400 ms (the worker runs the step and the SDK's request);
  - *first-token wait*: request sent → first token read, less the mock's 400 ms
    (``bench.capacity``'s figure);
* **starts a second**: N over the time from the burst's first request to its last turn's
  model step start.

Writes ``bench/results/starts.md`` and ``.json``. No target: it says where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import time
import uuid
from datetime import UTC
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from bench.capacity import (
    SPREAD_S,
    PinnedFloor,
    engine_base_env,
    layout_arguments,
    leave_core,
    pinned,
    start_pinned_worker,
)
from bench.common import (
    ROOT,
    ReplayServer,
    Row,
    WorkerProcess,
    activity_spans,
    cpu_seconds,
    event_epoch,
    loadavg,
    median,
    percentile,
    run_and_write,
    run_meta,
    start_worker,
    temporal_server,
)
from bench.cost_run import FIRST_TOKEN_S, paced
from bench.pace_floor import READY as PACE_FLOOR_READY

PACE_FLOOR_STEP = "pace_floor_model"
"""The contract floor's model-step activity (``bench.pace_floor``)."""

PHASES = {
    "to_workflow": "to its workflow",
    "to_first_task": "to its first task",
    "first_task": "first task",
    "step_to_token": "model step → first token",
    "wait": "first-token wait",
}
"""Where a turn of a burst waited, in order (the module docstring says what each spans)."""


def turn_marks(history: WorkflowHistory, model_step: str) -> dict[str, float]:
    """A turn workflow's moments (seconds since the epoch, the server's clock): ``started``,
    its first workflow task's ``task_started`` and ``task_completed``, and its first
    ``model_step``'s ``step_started`` (absent if it never got that far)."""
    first_of = {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: "started",
        EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED: "task_started",
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: "task_completed",
    }
    marks: dict[str, float] = {}
    for event in history.events:
        if event.event_type in first_of:
            marks.setdefault(first_of[event.event_type], event_epoch(event))
    steps = activity_spans(history, model_step)
    if steps and "started" in steps[0]:
        marks["step_started"] = steps[0]["started"].replace(tzinfo=UTC).timestamp()
    return marks


def phases(sent: float, first_token: float, marks: dict[str, float]) -> dict[str, float]:
    """One turn's waits (seconds, :data:`PHASES`) from when it was sent and its first token
    was read (this process's ``time.time()``) and its history's :func:`turn_marks`."""
    spans = {
        "to_workflow": ("sent", "started"),
        "to_first_task": ("started", "task_started"),
        "first_task": ("task_started", "task_completed"),
        "step_to_token": ("step_started", "first_token"),
        "wait": ("sent", "first_token"),
    }
    at = {**marks, "sent": sent, "first_token": first_token}
    out = {k: at[b] - at[a] for k, (a, b) in spans.items() if a in at and b in at}
    for k in ("step_to_token", "wait"):
        if k in out:
            out[k] -= FIRST_TOKEN_S
    return out


def burst_summary(turns: list[dict[str, float]], n: int, cpu: dict[str, float]) -> dict[str, Any]:
    """One burst's figures: per phase p50/p99 (ms) over its turns, CPU per turn (ms) of each
    process in ``cpu`` (seconds over the burst), and starts a second."""
    out: dict[str, Any] = {"turns": n, "measured": len(turns)}
    for key in PHASES:
        values = [t[key] for t in turns if key in t]
        out[key] = {p: round(percentile(values, p) * 1000, 1) for p in (50, 99)}
    out["cpu_ms_per_turn"] = {k: round(v / n * 1000, 2) for k, v in cpu.items()}
    sent = [t["sent"] for t in turns]
    stepped = [t["step_started"] for t in turns if "step_started" in t]
    if sent and stepped:
        out["starts_per_s"] = round(len(stepped) / max(max(stepped) - min(sent), 1e-3), 1)
    return out


# --- the two systems --------------------------------------------------------------------------------


async def engine_burst(turns: Any, n: int, pool: str) -> list[tuple[float, float, str]]:
    """The next turn on each of N conversations of ``pool``, requested within ``SPREAD_S``:
    per turn when it was sent, when its first token was read and its workflow id."""

    async def one(conversation: str) -> tuple[float, float, str]:
        await asyncio.sleep(random.uniform(0, SPREAD_S))
        sent = time.time()
        started = await turns.start(conversation, "Tell me a story.")
        first: float | None = None
        async for event in turns.chunks(conversation, started.turn_number):
            if first is None and event.type == "chunk" and event.data.get("type") == "text-delta":
                first = time.time()
            elif event.type == "turn-finish":
                break
        result = await turns.result(conversation, started)
        if first is None or result.status != "completed":
            raise RuntimeError(f"{conversation}: {result.status}, first token {first}")
        return sent, first, started.workflow_id

    return list(await asyncio.gather(*(one(f"{pool}-{i}") for i in range(n))))


async def contract_burst(
    client: Any, queue: str, n: int, pool: str, numbered: dict[str, int]
) -> list[tuple[float, float, str]]:
    """The next turn on each of N contract-floor conversations of ``pool`` (``numbered``
    counts each one's turns: its turn workflow's id), requested within ``SPREAD_S``: per
    turn when it was sent, when its first delta came over its relay and its workflow id."""
    from bench.floor import send_child

    async def one(conversation: str) -> tuple[float, float, str]:
        await asyncio.sleep(random.uniform(0, SPREAD_S))
        first: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if await reader.read(1) and not first.done():
                first.set_result(time.time())
            await reader.read()  # to the end of the step
            writer.close()

        server = await asyncio.start_server(relay, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            sent = time.time()
            await send_child(
                client, queue, conversation, uuid.uuid4().hex, "PaceFloorTurn", f"127.0.0.1:{port}"
            )
            token = await asyncio.wait_for(first, 30)
        finally:
            server.close()
        numbered[conversation] = numbered.get(conversation, 0) + 1
        return sent, token, f"{conversation}/turn-{numbered[conversation]}"

    return list(await asyncio.gather(*(one(f"{pool}-{i}") for i in range(n))))


async def burst_phases(
    client: Any, got: list[tuple[float, float, str]], model_step: str
) -> list[dict[str, float]]:
    """Each turn's :func:`phases` and moments, from its history (read after the burst, so
    that the reads cost the server nothing the burst is charged for)."""
    out = []
    for sent, first, workflow_id in got:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        marks = turn_marks(history, model_step)
        out.append({**marks, "sent": sent, **phases(sent, first, marks)})
    return out


async def cpu_over(pids: dict[str, int], run: Any) -> tuple[Any, dict[str, float]]:
    """``await run()`` and the CPU seconds each of ``pids`` used meanwhile."""
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    got = await run()
    return got, {k: cpu_seconds(p) - before[k] for k, p in pids.items()}


# --- the run ------------------------------------------------------------------------------------


SYSTEMS = {"engine": "durable-turns", "contract": "the contract floor"}
"""The two systems that start turns through Temporal (the direct loop is ``floor``)."""


async def run(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any], dict[str, Any]]:
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from durable_turns.client import TurnsClient
    from durable_turns.codec import data_converter_from_env
    from durable_turns.contract import MODEL_STEP

    cores, others, tmp = leave_core(args.core, "bench-starts-", args.tmp)
    load_start = loadavg()
    mock = ReplayServer(tmp)
    floor: PinnedFloor | None = None
    workers: list[WorkerProcess] = []
    raw: dict[str, Any] = {"core": args.core, "others": sorted(others), "bursts": {}}
    try:
        async with temporal_server(tmp) as (address, server):
            client = await Client.connect(address, data_converter=data_converter_from_env())
            bare = await Client.connect(address, data_converter=pydantic_data_converter)
            tag = uuid.uuid4().hex[:6]
            stream = f"sqlite:///{tmp / f'chunks-{tag}.db'}"
            env = {
                **engine_base_env(mock.base_url),
                "TURNS_CHUNK_STREAM_URL": stream,
                **dict(kv.split("=", 1) for kv in args.env),
            }
            engine = await asyncio.to_thread(
                start_pinned_worker, address, f"starts-{tag}", tmp, args.core, env
            )
            workers.append(engine)
            contract = await asyncio.to_thread(
                start_worker,
                pinned(args.core, [sys.executable, "-m", "bench.pace_floor", f"floor-{tag}"]),
                {
                    **os.environ,
                    "PYTHONPATH": str(ROOT),
                    "TEMPORAL_ADDRESS": address,
                    "ANTHROPIC_BASE_URL": mock.base_url,
                    "FLOOR_SANDBOX": "off",
                },
                tmp / "contract-floor.log",
                PACE_FLOOR_READY,
            )
            workers.append(contract)
            turns = TurnsClient(client, f"starts-{tag}", stream_url=stream)
            mock.script(paced(args.tokens))
            floor = await asyncio.to_thread(PinnedFloor, mock.base_url, tmp, args.core)
            numbered: dict[str, int] = {}
            bursts = {
                "engine": lambda n: engine_burst(turns, n, f"engine-{tag}"),
                "contract": lambda n: contract_burst(
                    bare, f"floor-{tag}", n, f"cf-{tag}", numbered
                ),
            }
            steps = {"engine": MODEL_STEP, "contract": PACE_FLOOR_STEP}
            pids = {"engine": engine.pid, "contract": contract.pid}
            print(f"[warm-up] {max(args.bursts)} conversations each …", flush=True)
            for burst in bursts.values():
                await burst(max(args.bursts))
            fl = floor
            await asyncio.to_thread(fl.round, max(args.bursts), args.tokens)
            for n in args.bursts:
                got: dict[str, list[dict[str, Any]]] = {"engine": [], "contract": [], "floor": []}
                for _ in range(args.rounds):  # the three systems in turn, round by round
                    for name, burst in bursts.items():
                        watched = {
                            "worker": pids[name],
                            "server": server["pid"],
                            "bench": os.getpid(),
                        }
                        done, cpu = await cpu_over(watched, lambda b=burst, n=n: b(n))
                        marked = await burst_phases(bare, done, steps[name])
                        got[name].append(burst_summary(marked, n, cpu))
                    summary, cpu = await cpu_over(
                        {"worker": fl.pid}, lambda n=n: asyncio.to_thread(fl.round, n, args.tokens)
                    )
                    got["floor"].append({**summary, "cpu_ms": cpu["worker"] / n * 1000})
                raw["bursts"][n] = got
                print(
                    f"[{n}] first-token wait p99: "
                    + ", ".join(
                        f"{label} {median(r['wait'][99] for r in got[k]):g} ms"
                        for k, label in SYSTEMS.items()
                    )
                    + f", direct SDK loop {median(r['wait_p99_ms'] for r in got['floor']):g} ms;"
                    " worker CPU per turn: "
                    + ", ".join(
                        f"{label} {cpu_of(got[k], 'worker'):.1f} ms" for k, label in SYSTEMS.items()
                    )
                    + f" (load {loadavg()})",
                    flush=True,
                )
            await turns.aclose()
    finally:
        for process in [floor, *workers, mock]:
            if process is not None:
                process.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    meta = run_meta(
        f"bursts of {','.join(map(str, args.bursts))} turns within {SPREAD_S:g} s, replies of"
        f" {args.tokens} tokens, {args.rounds} rounds each, each system pinned to core"
        f" {args.core}",
        args.command,
        load_start,
        server,
    )
    meta["machine"]["nproc"] = len(cores)
    meta["machine"]["pinned"] = f"core {args.core}: each system in turn; the rest: {others}"
    return rows_of(raw), raw, meta


def cpu_of(rounds: list[dict[str, Any]], process: str) -> float:
    """The median over ``rounds`` of ``process``'s CPU per turn (ms)."""
    return median(r["cpu_ms_per_turn"][process] for r in rounds)


def waits(rounds: list[dict[str, Any]], key: str = "wait") -> str:
    return f"{median(r[key][50] for r in rounds):g} / {median(r[key][99] for r in rounds):g} ms"


def rows_of(raw: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for n, got in raw["bursts"].items():
        e, c, f = got["engine"], got["contract"], got["floor"]
        direct = median(r["cpu_ms"] for r in f)
        rows += [
            Row(
                f"burst {n}",
                "worker CPU per turn",
                f"{cpu_of(e, 'worker'):.1f} ms",
                f"contract floor {cpu_of(c, 'worker'):.1f} ms; direct SDK loop {direct:.1f} ms",
                ratio=cpu_of(e, "worker") / cpu_of(c, "worker"),
            ),
            Row(
                f"burst {n}",
                "Temporal dev server CPU per turn",
                f"{cpu_of(e, 'server'):.1f} ms",
                f"contract floor {cpu_of(c, 'server'):.1f} ms",
                ratio=cpu_of(e, "server") / cpu_of(c, "server"),
                note=f"this process (the client and its readers): {cpu_of(e, 'bench'):.1f} ms"
                f" a turn of durable-turns, {cpu_of(c, 'bench'):.1f} ms of the contract floor",
            ),
            Row(
                f"burst {n}",
                "first-token wait p50 / p99",
                waits(e),
                f"contract floor {waits(c)}; direct SDK loop p99"
                f" {median(r['wait_p99_ms'] for r in f):g} ms",
                ratio=median(r["wait"][99] for r in e) / median(r["wait"][99] for r in c),
            ),
        ]
    return rows


def phases_table(raw: dict[str, Any]) -> str:
    lines = [
        "| turns in the burst | system | "
        + " | ".join(f"{label} p50 / p99" for label in PHASES.values())
        + " | starts a second | CPU per turn: worker · server · client |",
        "|---" * (len(PHASES) + 4) + "|",
    ]
    for n, got in raw["bursts"].items():
        for key, label in SYSTEMS.items():
            rounds = got[key]
            cpu = " · ".join(f"{cpu_of(rounds, p):.1f}" for p in ("worker", "server", "bench"))
            lines.append(
                f"| {n} | {label} | "
                + " | ".join(waits(rounds, k) for k in PHASES)
                + f" | {median(r.get('starts_per_s', 0) for r in rounds):g} | {cpu} ms |"
            )
        f = got["floor"]
        lines.append(
            f"| {n} | direct SDK loop | "
            + " | ".join("—" for _ in list(PHASES)[:-1])
            + f" | p99 {median(r['wait_p99_ms'] for r in f):g} ms | — |"
            f" {median(r['cpu_ms'] for r in f):.1f} · — · — ms |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.starts", description=__doc__.split("\n")[0])
    p.add_argument("--bursts", default="20,80,160", help="turns per burst, comma-separated")
    p.add_argument("--tokens", type=int, default=5, help="tokens per reply (after the first)")
    p.add_argument("--rounds", type=int, default=3, help="bursts per size (medians)")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the engine's worker (repeatable), e.g. TURNS_LOOP_COALESCE_MS=0",
    )
    layout_arguments(p, "starts")
    args = p.parse_args(argv)
    args.bursts = [int(x) for x in args.bursts.split(",")]
    args.command = " ".join(["python -m bench.starts", *argv])
    run_and_write(lambda: run(args), lambda raw: [phases_table(raw)], args.out)


if __name__ == "__main__":
    main()
