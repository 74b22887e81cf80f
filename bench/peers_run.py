"""The driver of measurement 6, run by ``bench/peers.py`` (in the peers' virtual env).

    python -m bench.peers_run --address A --tmp DIR --project-python PY
        --engine-model-1 M --engine-model-3 M --engine-model-5 M [--peers P,P] [sizes]

Every system gets a worker process of its own, so its CPU (``/proc/<pid>/stat``) is its own:
the outside floor (``bench.floor``, one ``FloorTurn`` workflow per turn running no-op
activities in place of the model steps and tool calls), each peer (``bench.peer_worker``)
and the engine (``worker.py``, started with the project's interpreter). The contract floor
runs the same no-op turns in the shape of the wire contract (an update on a conversation
workflow runs each turn as a child and answers with its result) on the floor's worker. This
process is only the client of all of them. Engine turns go over the wire contract only (plain
temporalio ``Client``, JSON dicts, update-with-start on ``ConversationWorkflow``), as any
Temporal client would send them.

1. Latency: 1-step and 5-step turns, one of each system after the other, round after round
   (the order rotates), so machine noise falls on all of them.
2. Worker CPU per 1-step turn: rounds of a batch of sequential 1-step turns per system; the
   worker process's utime + stime from just before a batch to 0.1 s after it, ÷ turns.
3. Throughput: bursts of N concurrent 3-step turns (2 tool calls) per system, on fresh
   worker processes, systems alternating burst by burst.
4. The peers' history bytes of one model step with 1K and 100K tokens of prior conversation.

Prints one line ``RESULT <json>``. Imports only temporalio and the peers (no durable_turns).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter

from bench import floor
from bench.common import (
    ROOT,
    WorkerProcess,
    activity_cost,
    cpu_seconds,
    median,
    percentile,
    prior_transcript_texts,
    start_engine_worker,
    start_floor_worker,
    start_worker,
)

MODULES = {"pydantic-ai": "bench.peer_pydantic_ai", "openai-agents": "bench.peer_openai_agents"}
PROMPT = "steps={steps} What is the weather in Oslo?"
FLOOR_SYSTEMS = ("floor", "contract-floor", "contract-floor-first")
"""The outside floor (a bare workflow per turn) and the contract floor (the same turns as
children of a conversation workflow's update; next turns of a warm conversation, and first
turns of new ones): one floor worker process serves them all."""
ENGINE_SYSTEMS = ("engine-next", "engine-first", "engine-start", "engine-direct")
"""The engine's rows: next turn (sendMessage on a warm conversation), first turn (sendMessage
creating a new conversation), next turn by startTurn + the turn workflow's result, and a
``TurnWorkflow`` a client starts itself, with no conversation workflow at all (a what-if:
what the turn costs without the conversation's hop)."""

Turn = Callable[[int], Awaitable[None]]
"""One turn of ``steps`` model steps (``steps - 1`` tool calls), awaited to its result."""


def request() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "What is the weather in Oslo?"}]}


async def engine_update(
    client: Client, queue: str, conversation: str, model: str, update: str
) -> Any:
    """An update-with-start on the conversation, plain JSON (what any Temporal client sends)."""
    op: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
        "ConversationWorkflow",
        id=conversation,
        task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    return await client.execute_update_with_start_workflow(
        update, {**request(), "model": model}, start_workflow_operation=op, result_type=dict
    )


async def engine_send(client: Client, queue: str, conversation: str, model: str) -> None:
    """``sendMessage``: answers with the turn's result."""
    result = await engine_update(client, queue, conversation, model, "sendMessage")
    assert result["status"] == "completed", result


async def engine_start(client: Client, queue: str, conversation: str, model: str) -> None:
    """``startTurn`` (answers once the turn started), then the turn workflow's own result:
    what ``TurnsClient.send`` does."""
    record = await engine_update(client, queue, conversation, model, "startTurn")
    handle = client.get_workflow_handle(record["workflow_id"], result_type=dict)
    result = await handle.result()
    assert result["status"] == "completed", result


async def engine_direct(client: Client, queue: str, conversation: str, model: str) -> None:
    """A ``TurnWorkflow`` started directly (``workflow_id`` = ``<conversation>/turn-1``): the
    same begin, model, tool and finish activities, but no conversation workflow, so no
    queue, no turn lock and no turn numbering; a new conversation id every time."""
    turn = {
        "conversation_id": conversation,
        "turn_number": 1,
        "request_id": f"{conversation}-r",
        "new_messages": request()["messages"],
        "model": model,
    }
    result = await client.execute_workflow(
        "TurnWorkflow", turn, id=f"{conversation}/turn-1", task_queue=queue, result_type=dict
    )
    assert result["status"] == "completed", result


@dataclass
class System:
    """One row of the table: its worker process and how it runs one turn."""

    name: str
    kind: str
    """Which worker serves it: floor, engine, or the peer's name."""
    worker: WorkerProcess | None = None
    queue: str = ""
    turn: Callable[[System, int], Awaitable[None]] | None = None
    error: str = ""
    latency: dict[str, list[float]] = field(default_factory=lambda: {"1": [], "5": []})
    cpu: list[dict[str, float]] = field(default_factory=list)
    bursts: list[dict[str, Any]] = field(default_factory=list)
    rss_mib: float = 0.0
    """The worker process's peak RSS (``VmHWM``), read before it is stopped."""

    async def run(self, steps: int) -> float | None:
        """One turn, timed; None when it failed (and the system is left out from then on)."""
        if self.error or self.turn is None:
            return None
        started = time.perf_counter()
        try:
            await self.turn(self, steps)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"[:500]
            return None
        return time.perf_counter() - started

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.error} if self.error else {}
        if any(self.latency.values()):
            out["latency"] = {
                s: {"median_s": median(xs), "samples": xs} for s, xs in self.latency.items()
            }
        if self.cpu:
            turns = sum(c["turns"] for c in self.cpu)
            out["cpu"] = {
                "per_turn_s": sum(c["cpu_s"] for c in self.cpu) / turns,
                "turns": turns,
                "batches": self.cpu,
            }
        if self.bursts:
            out["throughput"] = {
                "turns_per_s": median(b["turns_per_s"] for b in self.bursts),
                "p50_s": median(b["p50_s"] for b in self.bursts),
                "p95_s": median(b["p95_s"] for b in self.bursts),
                "worker_cpu_per_turn_s": median(b["worker_cpu_per_turn_s"] for b in self.bursts),
                "failed": sum(b["failed"] for b in self.bursts),
                "bursts": self.bursts,
            }
        if self.rss_mib:
            out["worker_peak_rss_mib"] = self.rss_mib
        return out


async def burst(n: int, one: Callable[[int], Awaitable[None]], pid: int) -> dict[str, Any]:
    """``n`` turns at once: turns/s, latency percentiles, the worker's CPU per turn."""
    latencies: list[float] = []
    errors: list[str] = []

    async def timed(i: int) -> None:
        started = time.perf_counter()
        try:
            await one(i)
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}"[:300])
        else:
            latencies.append(time.perf_counter() - started)

    cpu = cpu_seconds(pid)
    started = time.perf_counter()
    await asyncio.gather(*(timed(i) for i in range(n)))
    wall = time.perf_counter() - started
    await asyncio.sleep(0.1)
    return {
        "n": n,
        "wall_s": wall,
        "turns_per_s": n / wall,
        "p50_s": percentile(latencies, 50),
        "p95_s": percentile(latencies, 95),
        "failed": len(errors),
        "first_error": errors[0] if errors else "",
        "worker_cpu_per_turn_s": (cpu_seconds(pid) - cpu) / n,
    }


def rotated(systems: list[System], k: int) -> list[System]:
    """The systems in round ``k``'s order (each takes every place in turn), failed ones out."""
    live = [s for s in systems if not s.error]
    if not live:
        return []
    k %= len(live)
    return live[k:] + live[:k]


class Driver:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(args.tmp)
        self.tag = uuid.uuid4().hex[:6]
        self.models = {1: args.engine_model_1, 3: args.engine_model_3, 5: args.engine_model_5}
        self.peers = [p for p in (args.peers or "").split(",") if p]
        self.modules: dict[str, Any] = {}
        self.clients: dict[str, Any] = {}  # the peers' clients (with their plugins)
        self.versions: dict[str, dict[str, str]] = {}
        self.errors: dict[str, str] = {}
        self.workers: list[WorkerProcess] = []
        self.client: Client | None = None

    async def connect(self) -> None:
        self.client = await Client.connect(
            self.args.address, data_converter=pydantic_data_converter
        )
        for peer in list(self.peers):
            try:
                module = importlib.import_module(MODULES[peer])
                self.clients[peer] = await module.connect(self.args.address)
                self.modules[peer] = module
                versions = {}
                for name in [*module.PACKAGES, "temporalio"]:
                    with contextlib.suppress(metadata.PackageNotFoundError):
                        versions[name] = metadata.version(name)
                self.versions[peer] = versions
            except Exception as e:
                self.errors[peer] = f"{type(e).__name__}: {e}"[:500]
                self.peers.remove(peer)

    # --- worker processes -------------------------------------------------------------------

    def _start(self, kind: str, queue: str) -> WorkerProcess:
        address, tmp, python = self.args.address, self.tmp, self.args.project_python
        if kind == "floor":
            return start_floor_worker(address, queue, tmp, python)
        if kind == "engine":
            return start_engine_worker(address, queue, tmp, python)
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": address,
            "PYTHONPATH": str(ROOT),
            "OPENAI_AGENTS_DISABLE_TRACING": "1",
        }
        return start_worker(
            [sys.executable, "-m", "bench.peer_worker", kind, queue],
            env,
            tmp / f"peer-{queue}.log",
            "peer worker ready",
        )

    async def start_workers(self, phase: str, systems: list[System]) -> None:
        """A fresh worker process per system (started together); a failure marks the system."""

        async def one(system: System) -> None:
            system.queue = f"peers-{phase}-{system.name}-{self.tag}"
            try:
                system.worker = await asyncio.to_thread(self._start, system.kind, system.queue)
                self.workers.append(system.worker)
            except Exception as e:
                system.error = f"worker did not start: {e}"[-500:]

        await asyncio.gather(*(one(s) for s in systems))

    def stop_workers(self, systems: list[System] | None = None) -> None:
        for system in systems or []:  # peak RSS while the worker still runs
            if system.worker is not None:
                system.rss_mib = system.worker.peak_rss_mib()
        for worker in self.workers:
            worker.stop()
        self.workers.clear()

    # --- turns --------------------------------------------------------------------------------

    async def floor_turn(self, system: System, steps: int) -> None:
        assert self.client is not None
        activities = 2 * steps - 1  # one no-op activity per model step and per tool call
        wid = f"floor-{self.tag}-{uuid.uuid4().hex[:12]}"
        assert await floor.bare(self.client, system.queue, wid, activities) == activities

    async def contract_floor_turn(
        self, system: System, steps: int, conversation: str | None = None
    ) -> None:
        """The floor's turn through a conversation's update: as the engine's, a warm one per
        turn size for next turns, a new one each time for first turns (``conversation``
        overrides it). A new floor conversation has no store to open."""
        assert self.client is not None
        activities = 2 * steps - 1
        if conversation is None:
            conversation = (
                f"contract-first-{self.tag}-{uuid.uuid4().hex[:12]}"
                if system.name == "contract-floor-first"
                else f"contract-floor-{self.tag}-{steps}"
            )
        request_id = uuid.uuid4().hex
        result = await floor.send(
            self.client, system.queue, conversation, request_id, activities, opened=False
        )
        assert result == activities, result

    async def peer_turn(self, system: System, steps: int) -> None:
        module, client = self.modules[system.kind], self.clients[system.kind]
        wid = f"{system.kind}-{self.tag}-{uuid.uuid4().hex[:12]}"
        output = await module.turn(client, system.queue, wid, PROMPT.format(steps=steps), [])
        assert "Here you are" in output, output

    async def engine_turn(
        self, system: System, steps: int, conversation: str | None = None
    ) -> None:
        """A first turn (a new conversation id each time) or the next turn of the system's
        conversation for ``steps`` (``conversation`` overrides it)."""
        assert self.client is not None
        if conversation is None:
            conversation = (
                f"{system.name}-{self.tag}-{uuid.uuid4().hex[:12]}"
                if system.name in ("engine-first", "engine-direct")
                else f"{system.name}-{self.tag}-{steps}"
            )
        send = {"engine-start": engine_start, "engine-direct": engine_direct}.get(
            system.name, engine_send
        )
        await send(self.client, system.queue, conversation, self.models[steps])

    def system(self, name: str) -> System:
        if name == "floor":
            return System(name, "floor", turn=self.floor_turn)
        if name in ("contract-floor", "contract-floor-first"):
            return System(name, "floor", turn=self.contract_floor_turn)
        if name in MODULES:
            return System(name, name, turn=self.peer_turn)
        return System(name, "engine", turn=self.engine_turn)

    # --- the measurements ----------------------------------------------------------------------

    async def latency_and_cpu(self) -> dict[str, System]:
        """One worker process per kind of system: the floors share one, the engine's four
        rows another (each row's CPU is measured in batches of its own)."""
        a = self.args
        systems = [self.system(n) for n in [*FLOOR_SYSTEMS, *self.peers, *ENGINE_SYSTEMS]]
        first: dict[str, System] = {}
        for s in systems:
            first.setdefault(s.kind, s)
        await self.start_workers("lat", list(first.values()))
        for s in systems:
            served = first[s.kind]
            s.worker, s.queue, s.error = served.worker, served.queue, served.error
        try:
            for steps in (1, 5):
                for i in range(a.warmup + a.samples):
                    for system in rotated(systems, i):
                        took = await system.run(steps)
                        if took is not None and i >= a.warmup:
                            system.latency[str(steps)].append(took)
            for r in range(a.cpu_rounds):
                for system in rotated(systems, r):
                    assert system.worker is not None
                    before = cpu_seconds(system.worker.pid)
                    started = time.perf_counter()
                    for _ in range(a.cpu_turns):
                        await system.run(1)
                    wall = time.perf_counter() - started
                    await asyncio.sleep(0.1)  # the worker's last workflow task completion
                    used = cpu_seconds(system.worker.pid) - before
                    system.cpu.append({"turns": a.cpu_turns, "cpu_s": used, "wall_s": wall})
        finally:
            self.stop_workers(systems)
        return {s.name: s for s in systems}

    async def throughput(self) -> dict[str, System]:
        """N concurrent 3-step turns per system, each on a fresh worker process of its own."""
        a = self.args
        names = [*FLOOR_SYSTEMS, *self.peers, "engine-first", "engine-next"]
        systems = [self.system(n) for n in names]
        await self.start_workers("tp", systems)
        existing = {
            name: [f"existing-{name}-{self.tag}-{i}" for i in range(a.burst)]
            for name in ("engine-next", "contract-floor")
        }

        def one(system: System) -> Callable[[int], Awaitable[None]]:
            async def turn(i: int) -> None:
                assert system.turn is not None
                if system.name == "engine-next":
                    await self.engine_turn(system, 3, existing[system.name][i])
                elif system.name == "contract-floor":
                    await self.contract_floor_turn(system, 3, existing[system.name][i])
                else:
                    await system.turn(system, 3)

            return turn

        try:
            for system in systems:  # warm up the workers; the existing conversations' first turn
                if not system.error and system.worker is not None:
                    warm = await burst(
                        a.burst if system.name in existing else 5,
                        one(system),
                        system.worker.pid,
                    )
                    if warm["failed"]:
                        system.error = f"warm-up: {warm['first_error']}"
            for r in range(a.bursts):
                for system in rotated(systems, r):
                    assert system.worker is not None
                    system.bursts.append(await burst(a.burst, one(system), system.worker.pid))
        finally:
            self.stop_workers(systems)
        return {s.name: s for s in systems}

    async def history(self) -> dict[str, Any]:
        """Per peer: the history of one 1-step turn after 1K and 100K tokens of conversation."""
        out: dict[str, Any] = {}
        systems = [self.system(p) for p in self.peers]
        await self.start_workers("hist", systems)
        try:
            for system in systems:
                if system.error:
                    out[system.name] = {"error": system.error}
                    continue
                module, client = self.modules[system.kind], self.clients[system.kind]
                out[system.name] = {}
                for tokens in (1_000, 100_000):
                    prior = [{"role": r, "text": t} for r, t in prior_transcript_texts(tokens)]
                    wid = f"{system.kind}-hist-{self.tag}-{tokens}"
                    prompt = PROMPT.format(steps=1)
                    output = await module.turn(client, system.queue, wid, prompt, prior)
                    assert "Here you are" in output, output
                    history = await client.get_workflow_handle(wid).fetch_history()
                    cost = activity_cost(history, module.is_model_activity)
                    out[system.name][str(tokens)] = {
                        "step_events": cost.events / max(cost.activities, 1),
                        "step_bytes": cost.bytes / max(cost.activities, 1),
                        "turn_events": cost.total_events,
                        "turn_bytes": cost.total_bytes,
                        "activities": cost.per_type,
                    }
        finally:
            self.stop_workers()
        return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    driver = Driver(args)
    try:
        await driver.connect()
        latency = await driver.latency_and_cpu()
        throughput = await driver.throughput()
        history = await driver.history()
    finally:
        driver.stop_workers()
    systems: dict[str, Any] = {}
    for name, s in latency.items():
        systems[name] = s.summary()
    for name, s in throughput.items():  # engine-first: new conversations; -next, contract: existing
        entry, tp = systems.setdefault(name, {}), s.summary()
        entry["throughput"] = tp.get("throughput")
        entry["throughput_worker_peak_rss_mib"] = tp.get("worker_peak_rss_mib")
        if s.error:
            entry["throughput_error"] = s.error
    return {
        "peers": driver.peers,
        "versions": driver.versions,
        "errors": driver.errors,
        "systems": systems,
        "history": history,
        "sizes": {
            "warmup": args.warmup,
            "samples": args.samples,
            "cpu_rounds": args.cpu_rounds,
            "cpu_turns": args.cpu_turns,
            "burst": args.burst,
            "bursts": args.bursts,
        },
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--tmp", required=True, help="where worker logs and stores live")
    p.add_argument("--project-python", required=True, help="the interpreter of the engine")
    p.add_argument("--engine-model-1", required=True)
    p.add_argument("--engine-model-3", required=True)
    p.add_argument("--engine-model-5", required=True)
    p.add_argument("--peers", default="", help="comma-separated: " + ", ".join(MODULES))
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--samples", type=int, default=15)
    p.add_argument("--cpu-rounds", type=int, default=3)
    p.add_argument("--cpu-turns", type=int, default=10)
    p.add_argument("--burst", type=int, default=100)
    p.add_argument("--bursts", type=int, default=3)
    result = asyncio.run(main(p.parse_args()))
    print("RESULT " + json.dumps(result), flush=True)
    sys.stderr.flush()
    os._exit(0)  # temporalio on 3.11 can crash at interpreter exit
