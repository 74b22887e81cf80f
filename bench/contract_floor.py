"""What the engine adds to the contract floor, on a next turn: latency and worker CPU, alone.

    python -m bench.contract_floor [--rounds 40] [--cpu-rounds 6] [--cpu-turns 20] [--variants]
        [--engine NAME[:KEY=VALUE,...]]... [--engine-root NAME=DIR[:KEY=VALUE,...]]... [--out STEM]

The two rows of section 6 this is about (``python -m bench``'s durable-turns next turn by
``sendMessage`` and the contract floor's next turn), measured by themselves in a minute or
two instead of the whole section's twenty: the contract floor (``bench.floor``'s
``FloorConversation`` running each request as a ``FloorTurn`` child, the same no-op
activity in place of the model step) and one or more engine workers (``worker.py``, a 1-step
scripted turn), each a worker process of its own against one dev server, all in one run.

* Latency: ``--rounds`` rounds after the warm-up, one next turn of every system per round,
  the order rotating; the median of each system, and the median of its per-round ratios to
  the floor (paired: a noisy moment falls on both turns of a round).
* Conversations: each system's next turns go to one conversation for ``--per-conversation``
  timed turns (20), then to a fresh one warmed by an untimed turn (section 6's takes about
  50): the engine reads the transcript on every turn and the floor keeps none, so hundreds
  of turns in one conversation would measure the transcript's length, not the turn.
* Worker CPU: ``--cpu-rounds`` rounds of ``--cpu-turns`` sequential next turns per system
  (each batch on a fresh conversation, warmed first), alternating; utime + stime of the system's worker process from just before a batch to
  0.1 s after it, ÷ turns (``/proc/<pid>/stat``, 10 ms ticks: 20 turns resolve 0.5 ms).
* What a turn costs the server and the worker, from the histories of one turn of each system
  (the conversation's and the turn's): workflow tasks, the time the worker held them
  (task started → completed), local activities, search-attribute upserts, events.

``--variants`` adds two more floors, each a worker process of its own: the contract floor
outside temporalio's sandbox (the engine's workflows run outside it by default; the reference
floor runs in it, the Worker's default), alone and with a no-op local activity before and
after its activity, the shape of the engine's ``begin_turn`` and ``finish_turn``: the
engine's own shape with none of its work.

``--engine NAME:KEY=VALUE,...`` adds an engine worker run with those environment variables
(e.g. ``--engine lean:TURNS_WORKFLOW_SANDBOX=off``), ``--engine-root NAME=DIR[:KEY=VALUE,...]`` one run from
another checkout of the project (``git worktree add`` of an earlier commit): a before and
after of a code change in the same run. Without either, one engine worker as configured by
default. Results: ``bench/results/<STEM>.md`` and ``.json`` (default ``contract-floor``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench import floor
from bench.common import (
    ROOT,
    Row,
    WorkerProcess,
    cpu_seconds,
    engine_env,
    loadavg,
    median,
    ms,
    run_meta,
    script,
    start_floor_worker,
    temporal_server,
    tool_steps,
    write_results,
)
from bench.peers_run import engine_send

TARGETS = {"latency": 1.10, "cpu": 1.05}
"""Issue 28: the engine's next turn within these multiples of the contract floor's."""


@dataclass
class System:
    name: str
    worker: WorkerProcess
    queue: str
    engine: bool
    conversation: str
    bookkeeping: bool = False
    """A floor whose turns run a local activity before and after, as the engine's do."""
    turns: int = 0
    """Turns the current conversation has had."""
    latency: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    """CPU seconds per turn, one figure per batch."""
    error: str = ""


def _engine(address: str, tmp: Path, name: str, root: Path, env: dict[str, str]) -> System:
    queue = f"cf-{name}-{uuid.uuid4().hex[:6]}"
    worker = WorkerProcess(
        [sys.executable, str(root / "worker.py")],
        {**engine_env(address, queue, tmp, **env), "PYTHONPATH": str(root)},
        tmp / f"worker-{queue}.log",
        "worker ready",
    )
    worker.wait_ready()
    return System(name, worker, queue, True, f"cf-{name}-{uuid.uuid4().hex[:8]}")


VARIANTS = {"floor-unsandboxed": False, "floor-unsandboxed+bookkeeping": True}
"""``--variants``: the contract floor outside the sandbox (as the engine's workflows run by
default), alone and with the engine's two bookkeeping local activities around its activity:
the engine's own shape with none of its work, to tell what its code costs from what its
shape costs."""


def _floor(address: str, tmp: Path, name: str, bookkeeping: bool) -> System:
    queue = f"cf-{name}-{uuid.uuid4().hex[:6]}".replace("+", "-")
    worker = start_floor_worker(address, queue, tmp, FLOOR_SANDBOX="off")
    return System(name, worker, queue, False, f"{queue}-{uuid.uuid4().hex[:8]}", bookkeeping)


async def turn(client: Client, system: System, model: str, per_conversation: int) -> float:
    """One next turn, timed; past ``per_conversation`` turns, on a fresh conversation first
    warmed by an untimed turn (the engine reads its transcript on every turn, the floor has
    none: a conversation of hundreds of turns would measure the transcript's length)."""
    if system.turns >= per_conversation:
        system.conversation = f"cf-{system.name}-{uuid.uuid4().hex[:8]}"
        system.turns = 0
    if system.turns == 0:
        await _send(client, system, model)
    started = time.perf_counter()
    await _send(client, system, model)
    return time.perf_counter() - started


async def _send(client: Client, system: System, model: str) -> None:
    system.turns += 1
    if system.engine:
        await engine_send(client, system.queue, system.conversation, model)
    else:
        request = uuid.uuid4().hex
        await floor.send(
            client,
            system.queue,
            system.conversation,
            request,
            1,
            opened=False,
            bookkeeping=system.bookkeeping,
        )


async def shape(client: Client, system: System, turn_number: int) -> dict[str, Any]:
    """One next turn's histories: its workflow tasks (and how long the worker held each),
    local activities, upserts and events, the conversation's part and the turn's."""
    conversation = await client.get_workflow_handle(system.conversation).fetch_history()
    child = await client.get_workflow_handle(
        f"{system.conversation}/turn-{turn_number}"
    ).fetch_history()
    out: dict[str, Any] = {}
    # the conversation's part of the last turn: from the last update accepted on
    events = list(conversation.events)
    accepted = [
        i
        for i, e in enumerate(events)
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    start = max(0, accepted[-1] - 3) if accepted else 0  # its workflow task's three events
    for part, evs in (("conversation", events[start:]), ("turn", list(child.events))):
        tasks, held, markers, upserts, activities = 0, 0.0, 0, 0, 0
        started_at: float | None = None
        for e in evs:
            t = e.event_time.ToNanoseconds() / 1e9
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                started_at = t
            elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                tasks += 1
                held += t - (started_at or t)
            elif e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                markers += e.marker_recorded_event_attributes.marker_name == "core_local_activity"
            elif e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
                upserts += 1
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                activities += 1
        out[part] = {
            "workflow_tasks": tasks,
            "worker_held_s": held,
            "local_activities": markers,
            "activities": activities,
            "upserts": upserts,
            "events": len(evs),
        }
    return out


def command(engines: list[tuple[str, Path, dict[str, str]]]) -> str:
    """The command line as run, each ``--engine-root`` checkout named by its commit rather
    than by where it lies on this machine."""
    words = []
    for word in sys.argv[1:]:
        for name, root, _ in engines:
            if word == f"{name}={root}" or (word.startswith(f"{name}=") and root != ROOT):
                commit = subprocess.run(
                    ["git", "rev-parse", "--short", "HEAD"],
                    cwd=root,
                    capture_output=True,
                    text=True,
                    check=False,
                ).stdout.strip()
                word = f"{name}=<a checkout of {commit or 'an unknown commit'}>"
        words.append(word)
    return " ".join(["python -m bench.contract_floor", *words])


def engines_of(args: argparse.Namespace) -> list[tuple[str, Path, dict[str, str]]]:
    """(name, checkout, environment) of each engine worker ``--engine``/``--engine-root`` ask
    for; one of this checkout, as configured by default, when neither does."""
    engines: list[tuple[str, Path, dict[str, str]]] = []
    for spec in args.engine or []:
        name, _, pairs = spec.partition(":")
        env = dict(p.split("=", 1) for p in pairs.split(",") if p)
        engines.append((name, ROOT, env))
    for spec in args.engine_root or []:
        name, _, rest = spec.partition("=")
        root, _, pairs = rest.partition(":")
        env = dict(p.split("=", 1) for p in pairs.split(",") if p)
        engines.append((name, Path(root).resolve(), env))
    return engines or [("engine", ROOT, {})]


async def run(args: argparse.Namespace) -> int:
    load_start = loadavg()
    started = time.monotonic()
    engines = engines_of(args)
    with tempfile.TemporaryDirectory(prefix="durable-turns-cf-", dir=args.tmp) as d:
        tmp = Path(d)
        model = script(tmp, "cf-1", tool_steps(1))
        async with temporal_server(tmp) as (address, server):
            client = await Client.connect(address, data_converter=pydantic_data_converter)
            fq = f"cf-floor-{uuid.uuid4().hex[:6]}"
            systems = [
                System(
                    "contract-floor",
                    await asyncio.to_thread(start_floor_worker, address, fq, tmp),
                    fq,
                    False,
                    f"cf-floor-{uuid.uuid4().hex[:8]}",
                )
            ]
            if args.variants:
                systems += [
                    await asyncio.to_thread(_floor, address, tmp, name, bookkeeping)
                    for name, bookkeeping in VARIANTS.items()
                ]
            for name, root, env in engines:
                systems.append(await asyncio.to_thread(_engine, address, tmp, name, root, env))
            try:
                for _ in range(args.warmup):
                    for s in systems:
                        await turn(client, s, model, args.per_conversation)
                pairs: dict[str, list[float]] = {s.name: [] for s in systems[1:]}
                for i in range(args.rounds):
                    k = i % len(systems)
                    took = {}
                    for s in systems[k:] + systems[:k]:
                        took[s.name] = await turn(client, s, model, args.per_conversation)
                        s.latency.append(took[s.name])
                    for s in systems[1:]:
                        pairs[s.name].append(took[s.name] / took["contract-floor"])
                for r in range(args.cpu_rounds):
                    k = r % len(systems)
                    for s in systems[k:] + systems[:k]:
                        s.turns = args.per_conversation  # a fresh conversation, warmed
                        await turn(client, s, model, args.per_conversation)
                        before = cpu_seconds(s.worker.pid)
                        for _ in range(args.cpu_turns):
                            await _send(client, s, model)
                        await asyncio.sleep(0.1)
                        s.cpu.append((cpu_seconds(s.worker.pid) - before) / args.cpu_turns)
                shapes = {s.name: await shape(client, s, s.turns) for s in systems}
            finally:
                for s in systems:
                    s.worker.stop()
            meta = run_meta(
                "focused",
                command(engines),
                load_start,
                server,
            )
    meta["seconds"] = time.monotonic() - started
    rows, raw = report(systems, pairs, shapes, args)
    path = write_results(meta, rows, raw, args.out)
    from bench.common import render_text

    print(render_text(rows))
    print(f"\nwritten: {path} ({meta['seconds']:.0f} s)")
    return 0


def report(
    systems: list[System],
    pairs: dict[str, list[float]],
    shapes: dict[str, dict[str, Any]],
    args: argparse.Namespace,
) -> tuple[list[Row], dict[str, Any]]:
    floor_sys = systems[0]
    f_lat, f_cpu = median(floor_sys.latency), median(floor_sys.cpu)
    rows = [
        Row(
            "floor",
            "contract floor: next turn, 1 step (latency)",
            ms(f_lat),
            "the reference",
            note=f"{args.rounds} rounds after {args.warmup} warm-up, the order rotating",
        ),
        Row(
            "floor",
            "contract floor: worker CPU per 1-step next turn",
            ms(f_cpu),
            "the reference",
            note=f"median of {args.cpu_rounds} batches of {args.cpu_turns} sequential turns",
        ),
    ]
    for s in systems[1:]:
        if not s.engine:
            rows += _variant_rows(s, f_lat, f_cpu, median(pairs[s.name]))
            continue
        lat, cpu = median(s.latency), median(s.cpu)
        paired = median(pairs[s.name])
        shaped = next((v for v in systems if v.bookkeeping), None)
        rows.append(
            Row(
                "floor",
                f"{s.name}: next turn, 1 step (sendMessage), latency",
                ms(lat),
                f"contract floor {ms(f_lat)}",
                lat / f_lat,
                f"≤ {TARGETS['latency']}× contract floor",
                "met" if lat / f_lat <= TARGETS["latency"] else "MISSED",
                note=f"median of the per-round ratios {paired:.2f}×",
            )
        )
        rows.append(
            Row(
                "floor",
                f"{s.name}: worker CPU per 1-step next turn",
                ms(cpu),
                f"contract floor {ms(f_cpu)}",
                cpu / f_cpu,
                f"≤ {TARGETS['cpu']}× contract floor",
                "met" if cpu / f_cpu <= TARGETS["cpu"] else "MISSED",
                note="batches: "
                + ", ".join(f"{c * 1000:.1f}" for c in s.cpu)
                + " ms"
                + (
                    f"; {cpu / median(shaped.cpu):.2f}× {shaped.name} ({ms(median(shaped.cpu))})"
                    if shaped
                    else ""
                ),
            )
        )
    for s in systems:
        sh = shapes[s.name]
        c, t = sh["conversation"], sh["turn"]
        rows.append(
            Row(
                "shape",
                f"{s.name}: what one next turn costs",
                f"{c['workflow_tasks'] + t['workflow_tasks']} workflow tasks",
                f"conversation {c['workflow_tasks']}, turn {t['workflow_tasks']}; local"
                f" activities {c['local_activities'] + t['local_activities']}; activities"
                f" {c['activities'] + t['activities']};"
                f" search-attribute upserts {c['upserts'] + t['upserts']}; history events"
                f" {c['events'] + t['events']}",
                note="the histories of the last turn (how long the worker held each task is"
                " in the .json: one turn's figure, noisy)",
            )
        )
    raw = {
        "systems": {
            s.name: {"latency_s": s.latency, "cpu_per_turn_s": s.cpu, "shape": shapes[s.name]}
            for s in systems
        },
        "paired_ratios": pairs,
    }
    return rows, raw


def _variant_rows(s: System, f_lat: float, f_cpu: float, paired: float) -> list[Row]:
    """A floor variant's latency and CPU against the reference floor (no target)."""
    lat, cpu = median(s.latency), median(s.cpu)
    return [
        Row(
            "variant",
            f"{s.name}: next turn, 1 step, latency",
            ms(lat),
            f"contract floor {ms(f_lat)}",
            lat / f_lat,
            note=f"median of the per-round ratios {paired:.2f}×",
        ),
        Row(
            "variant",
            f"{s.name}: worker CPU per 1-step next turn",
            ms(cpu),
            f"contract floor {ms(f_cpu)}",
            cpu / f_cpu,
            note="batches: " + ", ".join(f"{c * 1000:.1f}" for c in s.cpu) + " ms",
        ),
    ]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.contract_floor", description=__doc__)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--cpu-rounds", type=int, default=6)
    p.add_argument("--cpu-turns", type=int, default=20)
    p.add_argument(
        "--per-conversation",
        type=int,
        default=20,
        help="timed turns per conversation before a fresh one (warmed by an untimed turn)",
    )
    p.add_argument("--engine", action="append", help="NAME[:KEY=VALUE,...] (repeatable)")
    p.add_argument(
        "--engine-root",
        action="append",
        help="NAME=DIR[:KEY=VALUE,...]: a checkout, with those variables (repeatable)",
    )
    p.add_argument(
        "--variants",
        action="store_true",
        help="also the floor outside the sandbox, alone and with two bookkeeping local activities",
    )
    p.add_argument("--tmp", default="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    p.add_argument("--out", default="contract-floor")
    return p.parse_args(argv)


if __name__ == "__main__":
    code = asyncio.run(run(parse()))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # temporalio on 3.11 can crash at interpreter exit
