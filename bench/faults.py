"""``python -m bench.faults``: a randomized fault run (issue 13; minutes, not a CI test).

One run per store (SQLite, PostgreSQL or both):

* a dev server with its data on disk (``--db-filename``), restarted once mid-run (SIGTERM,
  a pause of 1–3 s, started again on the same port and file);
* ``--workers`` worker processes (``python worker.py``, 3 by default) on one task queue, at
  the engine's defaults (heartbeat timeout 30 s, shutdown grace 10 s, liveness 1200 ms) unless
  ``--heartbeat-timeout-s``, ``--shutdown-grace-s`` or ``--liveness-ms`` set them (the runs
  up to 2026-12-03 used ``--heartbeat-timeout-s 2 --shutdown-grace-s 1 --liveness-ms off``:
  liveness did not exist yet);
* N concurrent conversations, each sending M turns one after the other through
  ``TurnsClient.send`` (update-with-start; on any error the same request id is sent again).
  Each conversation plays its own ``demo:`` script: every turn streams 30 numbered words,
  one chunk every 20–50 ms (chosen per turn), and every other turn first calls the
  ``get_weather`` tool;
* every link of the workers behind a fault proxy (``testkit/faultproxy.py``): to the
  Temporal server, to PostgreSQL (the PostgreSQL run) and to Redis, which holds the live
  chunk stream in both runs (``--no-network``: direct links, the SQLite chunk stream);
* a chaos loop that, 0.5–1.2 s after each fault began (``--every``; without the network
  faults 3–9 s; a replacement for a killed worker starts in the background; a worker is only
  killed while another is live; 210–260 faults per store in 280 s),
  either breaks a link for 1–6 s (60 %: a reset of every connection, a blackhole, a one-way
  partition either way, or 200 ms of latency at 16 KiB/s) or sends SIGKILL or SIGTERM
  (half and half) to a random live worker and starts a replacement, until the
  conversations are done or ``--duration`` has passed.

Then every conversation is audited: each request got exactly one TurnResult and ran as
exactly one turn workflow; the transcript holds each user message exactly once and one
assistant reply per turn whose text is the script's full text; each tool call has one
result; no turn is still running at the deadline. The report gives the counts (lost,
duplicated, truncated, mismatched, failed, stuck) and the recovery time of the turns a
fault hit: their latency beyond the scripted streaming time, minus the median of the same
figure for unhit turns of the same shape, per fault kind (SIGKILL also alone: the turns no
other kind of fault touched, and once: the turns one SIGKILL hit and nothing else). It also
counts the chaos loop's turns that found nothing to break, and times each worker's start
(spawn to "worker ready").

Writes ``bench/results/faults.md`` and ``.json`` (``--quick``: ``faults-quick.*``).
Every loop is bounded in count and time; the run stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client, WorkflowHistory
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from bench.common import (
    RESULTS,
    ROOT,
    WorkerProcess,
    code_version,
    engine_env,
    event_epoch,
    free_port,
    loadavg,
    machine_info,
    median,
    now_iso,
    percentile,
    versions,
)
from durable_turns.client import TurnsClient
from durable_turns.codec import data_converter_from_env
from durable_turns.config import Settings
from durable_turns.contract import TurnInput
from durable_turns.devserver import (
    FAST_DYNAMIC_CONFIG,
    SQLITE_PRAGMAS,
    EmbeddedServer,
    temporal_binary,
)
from durable_turns.messages import Message, StepStartPart, TextPart, ToolCallPart, ToolResultPart
from durable_turns.models.demo import _WORDS  # how the demo model splits text into chunks
from testkit.faultproxy import FaultProxy

PG_BASE = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_BASE = "redis://127.0.0.1:6379/0"
NETWORK_SHARE = 0.6
"""With ``--network``, the share of faults that break a link instead of a worker."""
WORKERS = 3
"""Worker processes by default (``--workers``)."""
WORDS = 30
ATTEMPT_TIMEOUT_S = 90.0
"""One ``send`` attempt waits at most this long before it is sent again (same request id)."""
MAX_ATTEMPTS = 30
EST_TURN_S = 2.5
"""A turn's rough length, to spread a conversation's turns over ``--duration``."""


# --- what each conversation says and what it must get back ---------------------------------


@dataclass
class Expected:
    conversation: str
    number: int
    request_id: str
    user_text: str
    steps: list[dict[str, Any]]
    tool: bool
    delay_ms: int

    @property
    def stored_text(self) -> str:
        """The reply's text parts, concatenated (``Message.text``)."""
        return "".join(s.get("text", "") for s in self.steps)

    @property
    def result_text(self) -> str:
        """``TurnResult.text``: the steps' texts separated by a blank line."""
        return "\n\n".join(s["text"] for s in self.steps if s.get("text"))

    @property
    def scripted_s(self) -> float:
        """How long the script alone streams (every chunk waits ``delay_ms``)."""
        chunks = sum(
            len(_WORDS.findall(s.get("text", ""))) + 3 * len(s.get("tool_calls", []))
            for s in self.steps
        )
        return chunks * self.delay_ms / 1000


def plan_conversation(conv: str, index: int, turns: int, rng: random.Random) -> list[Expected]:
    plan = []
    for k in range(1, turns + 1):
        delay = rng.randint(20, 50)
        words = " ".join(f"c{index}t{k}w{i:02d}" for i in range(1, WORDS + 1))
        final = {"text": words, "delay_ms": delay}
        tool = k % 2 == 0
        steps = (
            [
                {
                    "text": f"Checking the weather for turn {k}.",
                    "tool_calls": [{"name": "get_weather", "input": {"city": f"Town{index}x{k}"}}],
                    "delay_ms": delay,
                },
                final,
            ]
            if tool
            else [final]
        )
        plan.append(
            Expected(
                conversation=conv,
                number=k,
                request_id=f"{conv}-r{k}",
                user_text=f"[{conv}] turn {k}: count to {WORDS}, please",
                steps=steps,
                tool=tool,
                delay_ms=delay,
            )
        )
    return plan


def write_script(folder: Path, conv: str, plan: list[Expected]) -> str:
    path = folder / f"{conv}.json"
    path.write_text(json.dumps({"turns": [e.steps for e in plan]}))
    return f"demo:{path.name}"  # by name, from the workers' TURNS_DEMO_DIR


# --- the pieces that fail: the server and the workers ---------------------------------------


@dataclass
class Fault:
    kind: str
    """SIGKILL, SIGTERM, restart or network."""
    at: float
    """Wall-clock seconds (time.time())."""
    pid: int | None = None
    until: float | None = None
    """restart: when the server answered again."""
    exit_s: float | None = None
    """SIGTERM: how long the worker took to exit."""
    link: str | None = None
    """network: the link (``temporal``: workers ↔ server, ``store``: workers ↔ PostgreSQL,
    ``chunks``: workers ↔ Redis)."""
    mode: str | None = None
    """network: reset, blackhole, partition:<direction> or slow."""


NETWORK_MODES = ("reset", "blackhole", "partition:to_target", "partition:from_target", "slow")


class Links:
    """The fault proxies between the workers and the parts they reach over the network; a
    fault breaks one link for 1–6 s (a reset at once), never two faults on one link at once."""

    def __init__(self, proxies: dict[str, FaultProxy]) -> None:
        self.proxies = proxies
        self.busy: set[str] = set()
        self.healing: list[asyncio.Task[None]] = []

    async def fault(self, rng: random.Random) -> Fault | None:
        free = sorted(set(self.proxies) - self.busy)
        if not free:
            return None
        link, mode = rng.choice(free), rng.choice(NETWORK_MODES)
        proxy = self.proxies[link]
        fault = Fault("network", time.time(), link=link, mode=mode)
        if mode == "reset":
            await asyncio.to_thread(proxy.reset)
            fault.until = time.time()
            return fault
        if mode == "blackhole":
            proxy.blackhole()
        elif mode == "slow":
            proxy.slow(latency_s=0.2, bytes_per_s=16 * 1024)
        else:
            proxy.partition(mode.split(":", 1)[1])
        self.busy.add(link)
        self.healing.append(asyncio.create_task(self._heal(link, fault, rng.uniform(1, 6))))
        return fault

    async def _heal(self, link: str, fault: Fault, after_s: float) -> None:
        await asyncio.sleep(after_s)
        self.proxies[link].heal()
        fault.until = time.time()
        self.busy.discard(link)

    async def close(self) -> None:
        for task in self.healing:
            task.cancel()
        await asyncio.gather(*self.healing, return_exceptions=True)
        for proxy in self.proxies.values():
            proxy.heal()
            proxy.close()


class Server:
    """The dev server, restartable: same port, same database file."""

    def __init__(self, folder: Path) -> None:
        self.embedded = EmbeddedServer(folder, port=free_port(), ui=False)

    @property
    def address(self) -> str:
        return self.embedded.address

    async def start(self) -> None:
        await self.embedded.start(timeout_s=90)

    async def restart(self, pause_s: float) -> Fault:
        fault = Fault("restart", time.time())
        await asyncio.to_thread(self.embedded.stop)
        await asyncio.sleep(pause_s)
        for _ in range(20):  # the port may linger a moment
            try:
                await self.start()
                break
            except RuntimeError as e:
                if "already listens" not in str(e):
                    raise
                await asyncio.sleep(0.5)
        fault.until = time.time()
        return fault

    def stop(self) -> None:
        self.embedded.stop()


class Pool:
    """The worker processes; a fault takes one down and starts its replacement, without
    waiting for it (a worker takes seconds to be ready on a loaded machine, and the chaos goes
    on meanwhile). A worker is only taken down while another is live."""

    def __init__(self, env: dict[str, str], logs: Path, size: int = WORKERS) -> None:
        self.env = env
        self.logs = logs
        self.size = size
        self.live: list[WorkerProcess] = []
        self.dead: list[WorkerProcess] = []
        self.reaping: list[asyncio.Task[None]] = []
        self.starting: list[asyncio.Task[None]] = []
        self.started = 0
        self.ready_s: list[float] = []
        """Each started worker's time from spawn to its "worker ready" line."""

    def _start(self) -> WorkerProcess:
        self.started += 1
        began = time.monotonic()
        worker = WorkerProcess(
            [sys.executable, str(ROOT / "worker.py")],
            self.env,
            self.logs / f"worker-{self.started:03d}.log",
            "worker ready",
        )
        try:
            worker.wait_ready(timeout=120)
        except Exception:
            worker.kill()
            raise
        self.ready_s.append(time.monotonic() - began)
        return worker

    async def spawn(self) -> None:
        self.live.append(await asyncio.to_thread(self._start))

    @property
    def can_kill(self) -> bool:
        return len(self.live) >= 2

    @property
    def short(self) -> int:
        """How many workers are missing, counting the replacements on their way."""
        return self.size - len(self.live) - sum(1 for t in self.starting if not t.done())

    async def fault(self, kind: str, rng: random.Random) -> Fault:
        victim = rng.choice(self.live)
        self.live.remove(victim)
        fault = Fault(kind, time.time(), pid=victim.pid)
        victim.proc.send_signal(signal.SIGKILL if kind == "SIGKILL" else signal.SIGTERM)
        self.dead.append(victim)
        self.reaping.append(asyncio.create_task(self._reap(victim, fault)))
        self.replace()
        return fault

    def replace(self) -> None:
        """Start a replacement in the background (a failed start is tried again)."""

        async def start() -> None:
            for _ in range(5):
                try:
                    await self.spawn()
                    return
                except Exception as e:
                    print(f"  pool: a replacement did not start: {e}"[:300], flush=True)
                    await asyncio.sleep(2)

        self.starting.append(asyncio.create_task(start()))

    async def _reap(self, victim: WorkerProcess, fault: Fault) -> None:
        try:
            await asyncio.to_thread(victim.proc.wait, 30)
        except Exception:
            victim.kill()  # a SIGTERM that did not end it in 30 s
        fault.exit_s = time.time() - fault.at

    async def stop(self) -> None:
        await asyncio.gather(*self.starting, return_exceptions=True)
        await asyncio.gather(*self.reaping, return_exceptions=True)
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in self.live))
        for w in self.dead:
            with contextlib.suppress(Exception):
                w.stop()


# --- the conversations -----------------------------------------------------------------------


@dataclass
class Sent:
    """One request as the client saw it."""

    conversation: str
    number: int
    request_id: str
    sent: float
    done: float = 0.0
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None


async def converse(
    turns: TurnsClient,
    model: str,
    plan: list[Expected],
    think_s: float,
    chaos_until: float,
    deadline: float,
    rng: random.Random,
    out: list[Sent],
) -> None:
    """One conversation, turn after turn, a think time apart while the chaos lasts and
    none after it: every request is sent before the deadline (one not sent would be the
    bench's, not the engine's)."""
    await asyncio.sleep(rng.uniform(0, think_s))
    for exp in plan:
        sent = Sent(exp.conversation, exp.number, exp.request_id, time.time())
        out.append(sent)
        while sent.result is None and sent.attempts < MAX_ATTEMPTS:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            sent.attempts += 1
            try:
                result = await asyncio.wait_for(
                    turns.send(
                        exp.conversation, exp.user_text, model=model, request_id=exp.request_id
                    ),
                    timeout=min(ATTEMPT_TIMEOUT_S, remaining),
                )
                sent.result = result.model_dump(mode="json")
            except Exception as e:  # server restarting, update lost: send it again
                sent.errors.append(f"{type(e).__name__}: {e}"[:300])
                await asyncio.sleep(min(0.5 * sent.attempts, 3.0))
        sent.done = time.time()
        if sent.result is None:
            return  # later turns would queue behind it: the audit reports the rest as unsent
        await asyncio.sleep(
            min(rng.uniform(0, 2 * think_s), max(0.0, chaos_until - time.monotonic()))
        )


async def chaos(
    pool: Pool,
    server: Server,
    links: Links | None,
    rng: random.Random,
    until: float,
    every: tuple[float, float],
    restart_at: float,
    conversations: list[asyncio.Task[None]],
    faults: list[Fault],
    max_faults: int,
) -> int:
    """Breaks something every ``every`` seconds until ``until``; returns how many of its turns
    found nothing to break (every link broken, or no worker to spare)."""
    restarted = False
    idle = 0
    while time.monotonic() < until and len(faults) < max_faults:
        await asyncio.sleep(rng.uniform(*every))
        if all(t.done() for t in conversations) or time.monotonic() >= until:
            return idle
        try:
            if not restarted and time.monotonic() >= restart_at:
                restarted = True
                faults.append(await server.restart(rng.uniform(1, 3)))
                continue
            # a network fault 60 % of the time; when every link is already broken, or no
            # worker can be spared, the other kind (or, neither possible, a pause)
            network = links is not None and rng.random() < NETWORK_SHARE
            if not network and not pool.can_kill:
                network = links is not None
            fault = await links.fault(rng) if network and links is not None else None
            if fault is None and pool.can_kill:
                fault = await pool.fault(rng.choice(["SIGKILL", "SIGTERM"]), rng)
            if fault is not None:
                faults.append(fault)
            else:
                idle += 1
        except Exception as e:
            print(f"  chaos: {type(e).__name__}: {e}", flush=True)
            await asyncio.sleep(2)
            for _ in range(pool.short):
                pool.replace()
    return idle


# --- the audit ---------------------------------------------------------------------------


@dataclass
class Execution:
    workflow_id: str
    run_id: str
    status: str
    request_id: str
    history: WorkflowHistory


async def turn_executions(client: Client, queue: str) -> list[Execution]:
    found = []
    query = f'TaskQueue="{queue}" AND WorkflowType="TurnWorkflow"'
    async for ex in client.list_workflows(query):
        handle = client.get_workflow_handle(ex.id, run_id=ex.run_id)
        history = await handle.fetch_history()
        attrs = history.events[0].workflow_execution_started_event_attributes
        [inp] = client.data_converter.payload_converter.from_payloads(
            list(attrs.input.payloads), [TurnInput]
        )
        status = ex.status.name if ex.status else "UNKNOWN"
        found.append(Execution(ex.id, ex.run_id, status, inp.request_id, history))
    return found


def reply_text(message: Message) -> str:
    return "".join(p.text for p in message.parts if isinstance(p, TextPart))


def audit_turn(
    exp: Expected,
    sent: Sent | None,
    executions: list[Execution],
    users: list[Message],
    replies: list[Message],
) -> list[str]:
    """The problems of one request: ``kind: detail`` strings (empty when all is well)."""
    problems: list[str] = []
    running = [e for e in executions if e.status == "RUNNING"]
    if running:
        problems.append(f"stuck: turn workflow {running[0].workflow_id} still running")
    if len(executions) > 1:
        problems.append(
            "duplicated: ran as " + ", ".join(f"{e.workflow_id} ({e.status})" for e in executions)
        )
    result = sent.result if sent else None
    if result is None:
        if not running:
            why = "never sent" if sent is None else f"no result after {sent.attempts} attempt(s)"
            problems.append(
                f"lost: {why}" + (f"; last error {sent.errors[-1]}" if sent and sent.errors else "")
            )
    elif result["status"] != "completed":
        problems.append(f"failed: status {result['status']}, error {result.get('error')}")
    elif result["text"] != exp.result_text:
        problems.append(f"mismatched: TurnResult.text {result['text'][-80:]!r}")
    if len(users) > 1:
        problems.append(f"duplicated: user message stored {len(users)} times")
    elif not users and sent is not None and not running:
        problems.append("lost: user message not in the transcript")
    if len(replies) > 1:
        problems.append(f"duplicated: {len(replies)} assistant messages for the request")
    for reply in replies[:1]:
        text = reply_text(reply)
        want = exp.stored_text
        if text == want:
            pass
        elif want.startswith(text):
            problems.append(f"truncated: {len(text)} of {len(want)} characters: …{text[-60:]!r}")
        elif text.startswith(want) or text.count(want.split()[-1]) > 1:
            problems.append(f"duplicated: reply text {len(text)} characters for {len(want)}")
        else:
            problems.append(f"mismatched: reply text {text[-80:]!r}")
        calls = [p.tool_call_id for p in reply.parts if isinstance(p, ToolCallPart)]
        results = [p.tool_call_id for p in reply.parts if isinstance(p, ToolResultPart)]
        if len(calls) != int(exp.tool) or sorted(calls) != sorted(results):
            problems.append(f"mismatched: tool calls {calls}, results {results}")
        steps = sum(isinstance(p, StepStartPart) for p in reply.parts)
        if steps and steps != len(exp.steps):
            problems.append(f"mismatched: {steps} step(s) for {len(exp.steps)}")
        if reply.metadata.get("status") != "completed":
            problems.append(f"failed: reply stored as {reply.metadata.get('status')}")
    if not replies and result is not None and result["status"] == "completed":
        problems.append("lost: no assistant message in the transcript")
    return problems


def disruptions(
    history: WorkflowHistory, since: float | None = None, until: float | None = None
) -> list[str]:
    """What in a history shows a fault: retried activities, timed-out or failed tasks and
    activities (an activity's by its type: a failure by its message, e.g. liveness's)."""
    seen = []
    types: dict[int, str] = {}
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            types[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        if (since is not None and event_epoch(event) < since) or (
            until is not None and event_epoch(event) > until
        ):
            continue
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            attrs_f = event.activity_task_failed_event_attributes
            name = types.get(attrs_f.scheduled_event_id, "?")
            seen.append(f"activity failed: {name} ({attrs_f.failure.message[:60]})")
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            attrs_o = event.activity_task_timed_out_event_attributes
            name = types.get(attrs_o.scheduled_event_id, "?")
            seen.append(f"activity_task_timed_out: {name}")
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if attrs.attempt > 1:
                why = attrs.last_failure.message[:60] if attrs.HasField("last_failure") else ""
                seen.append(f"activity attempt {attrs.attempt} ({why})")
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            timeout = event.workflow_task_timed_out_event_attributes.timeout_type
            seen.append(
                f"workflow task timed out ({TimeoutType.Name(timeout).removeprefix('TIMEOUT_TYPE_').lower()})"
            )
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            seen.append(EventType.Name(kind).removeprefix("EVENT_TYPE_").lower())
    return seen


def held_by(
    history: WorkflowHistory, pid: str, at: float, since: float, until: float
) -> str | None:
    """How the worker ``pid``, stopped at ``at``, held part of this workflow's work between
    ``since`` and ``until`` (one turn's span); None when it did not.

    Its workflow task was running (it timed out), or the workflow sat in its cache and its next
    task came in that span (it waits on the dead worker's sticky queue), or one of the
    workflow's activities was running on it (it is retried), or was retried after ``at``.
    """
    sticky = None
    next_task = None
    last_worker = None
    task_worker: dict[int, str] = {}
    activities: dict[int, dict[str, Any]] = {}
    for event in history.events:
        when, kind = event_epoch(event), event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            last_worker = event.workflow_task_started_event_attributes.identity.split("@", 1)[0]
            task_worker[event.event_id] = last_worker
            if when < at:
                sticky = last_worker
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED and when >= at:
            next_task = when if next_task is None else next_task
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            attrs_t = event.workflow_task_timed_out_event_attributes
            # started on the worker and never finished, or waiting on its sticky queue
            owner = task_worker.get(attrs_t.started_event_id, last_worker)
            if owner == pid and max(at, since) <= when <= until:
                return "workflow task timed out"
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activities[event.event_id] = {"scheduled": when}
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            activities.get(attrs.scheduled_event_id, {}).update(
                started=when, attempt=attrs.attempt, pid=attrs.identity.split("@", 1)[0]
            )
        elif kind in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
            EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
        ):
            closed = event.activity_task_completed_event_attributes.scheduled_event_id or (
                event.activity_task_failed_event_attributes.scheduled_event_id
                or event.activity_task_timed_out_event_attributes.scheduled_event_id
                or event.activity_task_canceled_event_attributes.scheduled_event_id
            )
            activities.get(closed, {})["closed"] = when
    for act in activities.values():
        started, closed = act.get("started"), act.get("closed", float("inf"))
        if started is None or closed < since or started > until:
            continue
        if act["pid"] == pid and started < at < closed:
            return "activity running on it"
        if act["attempt"] > 1 and act["scheduled"] < at < started:
            return f"activity retried (attempt {act['attempt']})"
    if sticky == pid and next_task is not None and since <= next_task <= until:
        return "cached on it (sticky)"
    return None


def stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "min": min(values),
        "median": median(values),
        "p95": percentile(values, 95),
        "max": max(values),
    }


# --- one store -----------------------------------------------------------------------------


async def run_store(store: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    rng = random.Random(f"{args.seed}-{store}")
    began = time.monotonic()
    queue = f"faults-{store}-{uuid.uuid4().hex[:6]}"
    schema = f"faults_{uuid.uuid4().hex[:10]}"
    store_url = (
        f"sqlite:///{tmp / 'transcripts.db'}" if store == "sqlite" else f"{PG_BASE}?schema={schema}"
    )
    scripts = tmp / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    server = Server(tmp / "temporal")
    await server.start()
    links: Links | None = None
    worker_address, worker_store, extra = server.address, store_url, {}
    if args.network:  # every link of the workers through a fault proxy; clients go direct
        host, port = server.address.rsplit(":", 1)
        proxies = {"temporal": FaultProxy((host, int(port))).start()}
        redis_host, redis_port = REDIS_BASE.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        proxies["chunks"] = FaultProxy((redis_host, int(redis_port))).start()
        extra["TURNS_CHUNK_STREAM_URL"] = f"redis://{proxies['chunks'].address}/0"
        if store == "postgres":
            proxies["store"] = FaultProxy(("127.0.0.1", 5432)).start()
            worker_store = store_url.replace("127.0.0.1:5432", proxies["store"].address)
        worker_address = proxies["temporal"].address
        links = Links(proxies)
    env = engine_env(
        worker_address,
        queue,
        tmp,
        TURNS_STORE_URL=worker_store,
        TURNS_DEMO_DIR=str(scripts),
        **worker_settings(args),
        **extra,
    )
    pool = Pool(env, tmp, args.workers)
    faults: list[Fault] = []
    sent: list[Sent] = []
    plans: dict[str, list[Expected]] = {}
    try:
        await asyncio.gather(*(pool.spawn() for _ in range(args.workers)))
        client = await Client.connect(
            server.address, data_converter=data_converter_from_env(), runtime=quiet_runtime()
        )
        turns = TurnsClient(client, queue)
        think = max(0.0, args.duration / args.turns - EST_TURN_S)
        chaos_until = time.monotonic() + args.duration
        deadline = chaos_until + args.drain
        tasks = []
        for i in range(args.conversations):
            conv = f"faults-{store}-{i:03d}-{uuid.uuid4().hex[:4]}"
            plans[conv] = plan_conversation(conv, i, args.turns, rng)
            model = write_script(scripts, conv, plans[conv])
            crng = random.Random(rng.random())
            tasks.append(
                asyncio.create_task(
                    converse(turns, model, plans[conv], think, chaos_until, deadline, crng, sent)
                )
            )
        t0 = time.monotonic()
        print(
            f"[{store}] {args.conversations} conversations × {args.turns} turns on {args.workers}"
            f" workers; chaos for up to {args.duration:.0f} s",
            flush=True,
        )
        restart_at = t0 + args.duration * rng.uniform(0.35, 0.6)
        idle = await chaos(
            pool,
            server,
            links,
            rng,
            chaos_until,
            (args.every_min, args.every_max),
            restart_at,
            tasks,
            faults,
            max_faults=int(args.duration / args.every_min) + 2,
        )
        chaos_s = time.monotonic() - t0
        if not any(f.kind == "restart" for f in faults):  # the conversations ended first
            faults.append(await server.restart(rng.uniform(1, 3)))
        print(f"[{store}] chaos over after {chaos_s:.0f} s: {len(faults)} faults", flush=True)
        await asyncio.wait(tasks, timeout=max(1.0, deadline - time.monotonic()) + 5)
        for t in tasks:
            t.cancel()
        stuck_wait = time.monotonic()
        executions = await turn_executions(client, queue)
        report = await audit(client, store_url, plans, sent, executions, faults)
        for conv in plans:  # a conversation still busy at the deadline is stuck too
            try:
                state = await turns.state(conv)
                busy = state.running is not None or state.queued_count > 0
                detail = f"running {state.running}, {state.queued_count} queued"
            except Exception as e:
                busy, detail = True, f"state query failed: {type(e).__name__}: {e}"
            if busy:
                report["problems"].append({"conversation": conv, "problem": f"stuck: {detail}"})
                report["counts"]["stuck"] += 1
        report.update(
            store=store,
            store_url=store_url.replace(str(tmp), "<tmp>"),
            chaos_s=chaos_s,
            seconds=time.monotonic() - began,
            workers_started=pool.started,
            worker_ready_s=stats(pool.ready_s),
            idle_ticks=idle,
            audit_s=time.monotonic() - stuck_wait,
        )
        return report
    finally:
        if links is not None:
            await links.close()
        await pool.stop()
        server.stop()
        if store == "postgres":
            await drop_schema(schema)


def worker_settings(args: argparse.Namespace) -> dict[str, str]:
    """The recovery settings the workers run with: only those given on the command line (the
    rest stay at the engine's defaults)."""
    given = {
        "TURNS_HEARTBEAT_TIMEOUT_S": args.heartbeat_timeout_s,
        "TURNS_SHUTDOWN_GRACE_S": args.shutdown_grace_s,
        "TURNS_LIVENESS_MS": args.liveness_ms,
    }
    return {
        k: f"{v:g}" if isinstance(v, float) else str(v) for k, v in given.items() if v is not None
    }


def describe_settings(env: dict[str, str]) -> str:
    """The workers' recovery settings for the report, defaults named as such."""
    defaults = {
        "TURNS_HEARTBEAT_TIMEOUT_S": f"{Settings.heartbeat_timeout_s:g}",
        "TURNS_SHUTDOWN_GRACE_S": f"{Settings.shutdown_grace_s:g}",
        "TURNS_LIVENESS_MS": str(Settings.liveness_ms),
    }
    return ", ".join(
        f"`{k}={env[k]}`" if k in env else f"{k} {v} (default)" for k, v in defaults.items()
    )


def quiet_runtime() -> Runtime:
    """A client runtime that does not log every retried RPC while the server restarts."""
    global _RUNTIME
    if _RUNTIME is None:
        quiet = LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
        _RUNTIME = Runtime(telemetry=TelemetryConfig(logging=quiet))
    return _RUNTIME


_RUNTIME: Runtime | None = None


async def drop_schema(schema: str) -> None:
    import asyncpg

    with contextlib.suppress(Exception):
        conn = await asyncpg.connect(PG_BASE)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()


async def audit(
    client: Client,
    store_url: str,
    plans: dict[str, list[Expected]],
    sent: list[Sent],
    executions: list[Execution],
    faults: list[Fault],
) -> dict[str, Any]:
    from durable_turns.store import open_store

    store = open_store(store_url)
    await store.open()
    by_request = {s.request_id: s for s in sent}
    runs: dict[str, list[Execution]] = {}
    for ex in executions:
        runs.setdefault(ex.request_id, []).append(ex)
    problems: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    conv_histories: dict[str, WorkflowHistory] = {}
    try:
        for conv, plan in plans.items():
            messages = await store.messages(conv)
            with contextlib.suppress(Exception):
                conv_histories[conv] = await client.get_workflow_handle(conv).fetch_history()
            known = {e.request_id for e in plan}
            for m in messages:
                rid = m.metadata.get("request_id")
                if m.role == "assistant" and rid not in known:
                    problems.append(
                        {"conversation": conv, "problem": f"duplicated: stray reply {m.id}"}
                    )
            user_texts = {e.user_text for e in plan}
            for m in messages:
                if m.role == "user" and m.text not in user_texts:
                    problems.append(
                        {
                            "conversation": conv,
                            "problem": f"mismatched: stray user message {m.text[:60]!r}",
                        }
                    )
            for exp in plan:
                users = [m for m in messages if m.role == "user" and m.text == exp.user_text]
                replies = [
                    m
                    for m in messages
                    if m.role == "assistant" and m.metadata.get("request_id") == exp.request_id
                ]
                s = by_request.get(exp.request_id)
                found = audit_turn(exp, s, runs.get(exp.request_id, []), users, replies)
                for p in found:
                    problems.append(
                        {
                            "conversation": conv,
                            "request_id": exp.request_id,
                            "workflow_ids": [e.workflow_id for e in runs.get(exp.request_id, [])],
                            "problem": p,
                            "transcript": [f"{m.role}: {m.text[:100]}" for m in messages],
                        }
                    )
                if s is not None and s.result is not None and not found:
                    turns.append(
                        {
                            "conversation": conv,
                            "request_id": exp.request_id,
                            "tool": exp.tool,
                            "sent": s.sent,
                            "done": s.done,
                            "latency_s": s.done - s.sent,
                            "over_script_s": s.done - s.sent - exp.scripted_s,
                            "attempts": s.attempts,
                            "executions": runs.get(exp.request_id, []),
                        }
                    )
    finally:
        await store.close()
    recovery = classify(turns, faults, conv_histories)
    kinds = ["lost", "duplicated", "truncated", "mismatched", "failed", "stuck"]
    counts = {k: sum(1 for p in problems if p["problem"].startswith(k + ":")) for k in kinds}
    requests = sum(len(p) for p in plans.values())
    return {
        "conversations": len(plans),
        "requests": requests,
        "sent": len(sent),
        "completed": sum(1 for s in sent if s.result and s.result["status"] == "completed"),
        "client_retries": sum(max(0, s.attempts - 1) for s in sent),
        "turn_executions": len(executions),
        "faults": [asdict(f) for f in faults],
        "kills": {k: sum(1 for f in faults if f.kind == k) for k in ("SIGKILL", "SIGTERM")},
        "restarts": sum(1 for f in faults if f.kind == "restart"),
        "restart_downtime_s": [f.until - f.at for f in faults if f.until and f.kind == "restart"],
        "network": {
            link: {
                mode: sum(1 for f in faults if f.link == link and f.mode == mode)
                for mode in NETWORK_MODES
            }
            for link in sorted({f.link for f in faults if f.link})
        },
        "network_faults": sum(1 for f in faults if f.kind == "network"),
        "sigterm_exit_s": stats([f.exit_s for f in faults if f.kind == "SIGTERM" and f.exit_s]),
        "counts": counts,
        "problems": problems,
        "recovery": recovery,
    }


def classify(
    turns: list[dict[str, Any]], faults: list[Fault], conv_histories: dict[str, WorkflowHistory]
) -> dict[str, Any]:
    """Which turns a fault hit, and what it cost them beyond an unhit turn of the same shape."""
    for t in turns:
        hits = []
        histories = [e.history for e in t.pop("executions")]
        conv = conv_histories.get(t["conversation"])
        troubles = [d for h in histories for d in disruptions(h)]
        if conv is not None:
            troubles += [f"conversation: {d}" for d in disruptions(conv, t["sent"], t["done"])]
        t["hit_how"] = []
        struck: set[int] = set()  # which faults (by index) hit it
        for i, f in enumerate(faults):
            if f.kind in ("restart", "network"):
                if f.at <= t["done"] and (f.until or f.at) >= t["sent"]:
                    hits.append(f.kind)
                    struck.add(i)
                continue
            if not t["sent"] - 30 <= f.at <= t["done"]:
                continue
            pid = str(f.pid)
            for name, history in [("turn", h) for h in histories] + [("conversation", conv)]:
                how = (
                    held_by(history, pid, f.at, t["sent"], t["done"])
                    if history is not None
                    else None
                )
                if how:
                    hits.append(f.kind)
                    struck.add(i)
                    t["hit_how"].append(f"{f.kind} of {pid}: {name} {how}")
        t["hit_by"] = sorted(set(hits))
        t["hit_count"] = len(struck)
        t["disruptions"] = troubles
    baseline = {
        tool: median(t["over_script_s"] for t in turns if not t["hit_by"] and t["tool"] == tool)
        for tool in (False, True)
    }
    for t in turns:
        t["extra_s"] = t["over_script_s"] - baseline[t["tool"]]

    def extra(pick: Any) -> dict[str, Any]:
        return stats([t["extra_s"] for t in turns if pick(t)])

    return {
        "baseline_over_script_s": {"plain": baseline[False], "tool": baseline[True]},
        "unhit_latency_s": stats([t["latency_s"] for t in turns if not t["hit_by"]]),
        "hit_any": extra(lambda t: t["hit_by"]),
        "hit_SIGKILL": extra(lambda t: "SIGKILL" in t["hit_by"] and "restart" not in t["hit_by"]),
        "hit_SIGKILL_alone": extra(lambda t: t["hit_by"] == ["SIGKILL"]),
        "hit_SIGKILL_once": extra(lambda t: t["hit_by"] == ["SIGKILL"] and t["hit_count"] == 1),
        "hit_SIGTERM": extra(lambda t: t["hit_by"] == ["SIGTERM"]),
        "hit_restart": extra(lambda t: "restart" in t["hit_by"]),
        "hit_network": extra(lambda t: t["hit_by"] == ["network"]),
        "task_timeout_turns": sum(
            1 for t in turns if any("(start_to_close)" in d for d in t["disruptions"])
        ),
        "unexplained_disruptions": [
            (t["request_id"], t["disruptions"])
            for t in turns
            if t["disruptions"] and not t["hit_by"]
        ],
        "turns": turns,
    }


# --- the report ----------------------------------------------------------------------------


def fmt_stats(s: dict[str, Any]) -> str:
    if not s.get("n"):
        return "—"
    return f"{s['min']:.2f} / {s['median']:.2f} / {s['p95']:.2f} / {s['max']:.2f} s (n={s['n']})"


def table(reports: list[dict[str, Any]]) -> list[list[str]]:
    head = ["", *(r["store"] for r in reports)]
    rows = [
        (
            "conversations × turns",
            lambda r: f"{r['conversations']} × {r['requests'] // r['conversations']}",
        ),
        ("turns completed", lambda r: f"{r['completed']} of {r['requests']}"),
        ("turn workflows run", lambda r: str(r["turn_executions"])),
        ("SIGKILL / SIGTERM", lambda r: f"{r['kills']['SIGKILL']} / {r['kills']['SIGTERM']}"),
        (
            "server restarts (down)",
            lambda r: (
                f"{r['restarts']} ({', '.join(f'{d:.1f} s' for d in r['restart_downtime_s'])})"
            ),
        ),
        (
            "network faults (link: reset / blackhole / one-way ×2 / slow)",
            lambda r: (
                f"{r.get('network_faults', 0)}: "
                + "; ".join(
                    f"{link} {' / '.join(str(n) for n in modes.values())}"
                    for link, modes in r.get("network", {}).items()
                )
                if r.get("network_faults")
                else "—"
            ),
        ),
        ("faults in all", lambda r: str(len(r["faults"]))),
        (
            "chaos turns with nothing to break (no worker to spare)",
            lambda r: str(r.get("idle_ticks", "—")),
        ),
        (
            "worker start: spawn → ready min/med/p95/max",
            lambda r: fmt_stats(r.get("worker_ready_s", {})),
        ),
        ("client re-sends", lambda r: str(r["client_retries"])),
        ("lost", lambda r: str(r["counts"]["lost"])),
        ("duplicated", lambda r: str(r["counts"]["duplicated"])),
        ("truncated", lambda r: str(r["counts"]["truncated"])),
        ("mismatched", lambda r: str(r["counts"]["mismatched"])),
        ("failed (status ≠ completed)", lambda r: str(r["counts"]["failed"])),
        ("stuck", lambda r: str(r["counts"]["stuck"])),
        (
            "unhit turn latency min/med/p95/max",
            lambda r: fmt_stats(r["recovery"]["unhit_latency_s"]),
        ),
        (
            "recovery, any fault: extra min/med/p95/max",
            lambda r: fmt_stats(r["recovery"]["hit_any"]),
        ),
        ("… SIGKILL", lambda r: fmt_stats(r["recovery"]["hit_SIGKILL"])),
        (
            "… SIGKILL alone (no other kind of fault in the turn)",
            lambda r: fmt_stats(r["recovery"].get("hit_SIGKILL_alone", {})),
        ),
        (
            "… one SIGKILL (the only fault in the turn)",
            lambda r: fmt_stats(r["recovery"].get("hit_SIGKILL_once", {})),
        ),
        ("… SIGTERM", lambda r: fmt_stats(r["recovery"]["hit_SIGTERM"])),
        ("SIGTERM: the worker's exit after", lambda r: fmt_stats(r.get("sigterm_exit_s", {}))),
        ("… server restart", lambda r: fmt_stats(r["recovery"]["hit_restart"])),
        ("… network only", lambda r: fmt_stats(r["recovery"].get("hit_network", {}))),
        (
            "hit turns that waited out a workflow task timeout",
            lambda r: str(r["recovery"]["task_timeout_turns"]),
        ),
        ("run time (chaos)", lambda r: f"{r['seconds']:.0f} s ({r['chaos_s']:.0f} s)"),
    ]
    return [head, *([name, *(f(r) for r in reports)] for name, f in rows)]


def render_text(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_markdown(
    meta: dict[str, Any], rows: list[list[str]], reports: list[dict[str, Any]]
) -> str:
    machine = meta["machine"]
    out = [
        f"# Fault run ({meta['mode']})",
        "",
        f"- date: {meta['date']}; took {meta['seconds']:.0f} s",
        f"- command: `{meta['command']}`",
        f"- machine: {machine['nproc']} cores ({machine['cpu']}), {machine['ram_gib']} GiB RAM,"
        f" load average {machine['loadavg_start']} at start, {meta['loadavg_end']} at end",
        f"- code: {meta['code']}; Python {meta['python']}, temporalio {meta['versions'].get('temporalio')},"
        f" {meta['server_version']}",
        "- server: `temporal server start-dev --headless --db-filename <tmp>/temporal.db"
        + "".join(f" --sqlite-pragma {p}" for p in SQLITE_PRAGMAS)
        + f"`, dynamic config {', '.join('`' + v + '`' for v in FAST_DYNAMIC_CONFIG)}; restarted once"
        " mid-run (SIGTERM, 1–3 s down, same port and file)",
        f"- workers: {meta['args']['workers']} × `python worker.py`, {meta['settings']}; a fault every"
        f" {meta['every']} s"
        " (SIGKILL or SIGTERM to a random live worker while another is live, its replacement"
        " started in the background; with the network faults, 60 % of them break one worker"
        " link for 1–6 s instead, and the other kind is chosen when every link is broken or no"
        " worker can be spared)",
        f"- turns: {WORDS} numbered words per reply, one chunk every 20–50 ms; every other turn"
        " calls `get_weather` first (2 model steps)",
        "- recovery = a hit turn's latency beyond its scripted streaming time, minus the median"
        " of that for unhit turns of the same shape (min / median / p95 / max)",
        "",
        "| " + " | ".join(rows[0]) + " |",
        "|" + "|".join("---" for _ in rows[0]) + "|",
        *("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:]),
    ]
    for r in reports:
        if r["problems"]:
            out += ["", f"## Problems ({r['store']})", ""]
            out += [
                f"- `{p.get('request_id', p['conversation'])}` {p['problem']}"
                f" (workflows {', '.join(p.get('workflow_ids', [])) or '—'})"
                for p in r["problems"][:50]
            ]
    return "\n".join(out) + "\n"


def rounded(value: Any) -> Any:
    """Floats to milliseconds (and microseconds below 1): the results file stays small."""
    if isinstance(value, float):
        return round(value, 3) if abs(value) >= 1 else round(value, 6)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def dump_json(payload: dict[str, Any]) -> str:
    """The report as JSON; each turn's record on one line, so the file stays small and diffs."""
    data = rounded(json.loads(json.dumps(payload, default=str)))
    compact: dict[str, str] = {}
    for report in data["reports"]:
        rows = report["recovery"]["turns"]
        for i, row in enumerate(rows):
            key = f"@turn-{len(compact)}@"
            compact[key] = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
            rows[i] = key
    text = json.dumps(data, indent=1, ensure_ascii=False)
    for key, row in compact.items():
        text = text.replace(f'"{key}"', row, 1)
    return text + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with each default that depends on another option filled in (the
    pace, ``every_min``/``every_max``, from ``--every``, else from ``--network`` and
    ``--quick``)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.faults", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--conversations", type=int)
    parser.add_argument("--turns", type=int)
    parser.add_argument("--duration", type=float, help="seconds of chaos (at most)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--quick", action="store_true", help="a ~1 minute run per store")
    parser.add_argument("--tmp", help="where the server's database and the stores live")
    parser.add_argument("--out", help="results file stem under bench/results/")
    parser.add_argument(
        "--heartbeat-timeout-s",
        type=float,
        help="the workers' TURNS_HEARTBEAT_TIMEOUT_S (default: the engine's, 30 s; the runs up"
        " to 2026-12-03 used 2)",
    )
    parser.add_argument(
        "--shutdown-grace-s",
        type=float,
        help="the workers' TURNS_SHUTDOWN_GRACE_S (default: the engine's, 10 s; earlier runs: 1)",
    )
    parser.add_argument(
        "--liveness-ms",
        help="the workers' TURNS_LIVENESS_MS, or off (default: the engine's, 1200 ms; earlier"
        " runs: off, liveness did not exist yet)",
    )
    parser.add_argument(
        "--workers", type=int, default=WORKERS, help=f"worker processes (default {WORKERS})"
    )
    parser.add_argument(
        "--every",
        nargs=2,
        type=float,
        metavar=("MIN", "MAX"),
        help="seconds between faults, drawn uniformly (default: 0.5 1.2 with the network"
        " faults, 3 9 without; --quick: 1 2 and 3 6)",
    )
    parser.add_argument(
        "--network",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="put each worker link (Temporal, PostgreSQL, Redis chunks) behind a fault proxy"
        " and break links too (default on)",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.conversations = args.conversations or (8 if quick else 24)
    args.turns = args.turns or (5 if quick else 12)
    args.duration = args.duration or (30.0 if quick else 280.0)
    args.drain = 60.0 if quick else 150.0
    if args.workers < 2:
        parser.error("--workers: at least 2 (a worker is only killed while another is live)")
    # the full run: a fault every 0.5–1.2 s (most of them on links; over 200 per store)
    if args.every:
        args.every_min, args.every_max = sorted(args.every)
        if args.every_min <= 0:
            parser.error("--every: the seconds between faults must be above 0")
    elif args.network:
        args.every_min, args.every_max = (1.0, 2.0) if quick else (0.5, 1.2)
    else:  # every fault a worker's death: the earlier pace
        args.every_min, args.every_max = (3.0, 6.0) if quick else (3.0, 9.0)
    return args


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quick = args.quick
    stores = ["sqlite", "postgres"] if args.store == "both" else [args.store]
    meta: dict[str, Any] = {
        "mode": "quick" if quick else "full",
        "date": now_iso(),
        "command": " ".join(
            ["python -m bench.faults", *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": machine_info(),
        "code": code_version(),
        "python": sys.version.split()[0],
        "versions": versions(),
        "every": f"{args.every_min:g}–{args.every_max:g}",
        "settings": describe_settings(worker_settings(args)),
        "args": {k: v for k, v in vars(args).items() if k != "tmp"},
    }
    probe = await asyncio.create_subprocess_exec(
        temporal_binary(), "--version", stdout=asyncio.subprocess.PIPE
    )
    meta["server_version"] = (await probe.communicate())[0].decode().strip()
    began = time.monotonic()
    unhandled: list[str] = []

    def on_unhandled(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        unhandled.append(f"{context.get('message')}: {type(error).__name__}: {error}"[:300])

    asyncio.get_running_loop().set_exception_handler(on_unhandled)
    reports = []
    for store in stores:
        tmp = Path(tempfile.mkdtemp(prefix=f"bench-faults-{store}-", dir=args.tmp))
        report = await run_store(store, args, tmp)
        reports.append(report)
        bad = sum(report["counts"].values())
        if bad:
            print(f"[{store}] {bad} problem(s); logs kept in {tmp}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    meta["seconds"] = time.monotonic() - began
    meta["unhandled_async_errors"] = unhandled
    meta["loadavg_end"] = loadavg()
    rows = table(reports)
    print()
    print(render_text(rows))
    for r in reports:
        for p in r["problems"][:20]:
            print(f"  [{r['store']}] {p.get('request_id', p['conversation'])}: {p['problem']}")
    stem = args.out or ("faults-quick" if quick else "faults")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.md").write_text(render_markdown(meta, rows, reports))
    (RESULTS / f"{stem}.json").write_text(dump_json({**meta, "reports": reports}))
    print(f"\nwrote {RESULTS / (stem + '.md')}")
    return 1 if any(sum(r["counts"].values()) for r in reports) else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
