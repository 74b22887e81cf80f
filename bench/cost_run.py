"""``bench.cost``'s measurements after the CPU rounds: heartbeats per long step, billable
actions per turn (ours and the peers'), and the rows of all three."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import actions
from bench.common import ROOT, Row, WorkerProcess, activity_spans, judged, median, ready_worker

FIRST_TOKEN_S, TOKENS_PER_S = 0.4, 60.0
PRICE_PER_MILLION = 50.0
"""US dollars per million actions, Temporal Cloud's first tier (the first 5M actions of a
month; docs.temporal.io/cloud/pricing, "Action pricing")."""
OLD_BEATS_PER_S = 4.0
"""The scheme issue 36 describes: a streaming step heartbeating every 250 ms."""
TEXT, TOOL = "anthropic/text_basic.sse", "anthropic/tool_use.sse"


@dataclass
class Engine:
    name: str
    worker: WorkerProcess
    turns: Any
    """A ``TurnsClient`` on the worker's task queue (and chunk stream)."""
    conversations: list[str]


@dataclass
class Ctx:
    address: str
    server_pid: int
    metrics_port: int
    tmp: Path
    mock: Any
    client: Any
    engines: dict[str, Engine] = field(default_factory=dict)
    no_marks: Engine | None = None


def paced(tokens: int = 0, times: int = 10**9, fixture: str | None = None) -> dict[str, Any]:
    """A paced reply for the mock: ``tokens`` text deltas, or a recorded fixture."""
    from bench.scale import sse_body

    reply: dict[str, Any] = {"first_token_s": FIRST_TOKEN_S, "tokens_per_s": TOKENS_PER_S}
    return reply | ({"fixture": fixture} if fixture else {"body": sse_body(tokens), "times": times})


def scrape(ctx: Ctx) -> actions.Metrics:
    return actions.scrape(ctx.metrics_port)


# --- heartbeats per long step -------------------------------------------------------------------


async def long_turn(ctx: Ctx, engine: Engine, tokens: int) -> dict[str, Any]:
    """One turn of one ``tokens``-token step: heartbeats the server got, the last ``beats``
    a describe showed, the step's length."""
    from durable_turns.contract import MODEL_STEP

    ctx.mock.script(paced(tokens, times=1))
    conversation = f"cost-long-{uuid.uuid4().hex[:6]}"
    before = await asyncio.to_thread(scrape, ctx)
    started = await engine.turns.start(conversation, "Tell me a long story.")
    result = asyncio.create_task(engine.turns.result(conversation, started))
    handle = ctx.client.get_workflow_handle(started.workflow_id)
    beats = 0
    while not result.done():
        with contextlib.suppress(Exception):
            described = await handle.describe()
            for pending in described.raw_description.pending_activities:
                payloads = pending.heartbeat_details.payloads
                if pending.activity_type.name == MODEL_STEP and payloads:
                    last = (await ctx.client.data_converter.decode(payloads))[-1]
                    if isinstance(last, dict):
                        beats = max(beats, int(last.get("beats", 0)))
        await asyncio.sleep(0.5)
    outcome = await result
    await asyncio.sleep(0.5)
    after = await asyncio.to_thread(scrape, ctx)
    spans = activity_spans(await handle.fetch_history(), MODEL_STEP)
    step_s = sum((s["closed"] - s["started"]).total_seconds() for s in spans if "closed" in s)
    return {
        "status": outcome.status,
        "sent": actions.requests(before, after, "RecordActivityTaskHeartbeat"),
        "beats_seen": beats,
        "step_s": step_s,
    }


async def measure_heartbeats(ctx: Ctx, long_step_s: float) -> dict[str, Any]:
    tokens = round(long_step_s * TOKENS_PER_S)
    out = {"cancel marks (the default)": await long_turn(ctx, ctx.engines["default hooks"], tokens)}
    if ctx.no_marks is not None:
        out["no cancel marks (the former scheme)"] = await long_turn(ctx, ctx.no_marks, tokens)
    return out


# --- billable actions per turn ------------------------------------------------------------------


def summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The samples, and the kinds and metric of the median one (by total)."""
    ordered = sorted(samples, key=lambda s: s["total"])
    mid = ordered[(len(ordered) - 1) // 2]
    return {
        "samples": samples,
        "total": median(s["total"] for s in samples),
        "metric_total": median(s["metric_total"] for s in samples),
        "median_kinds": mid["kinds"],
        "median_metric": mid["metric"],
    }


def counted(events: list[Any], before: Any, after: Any) -> dict[str, Any]:
    """Actions of ``events`` by the rules, plus heartbeats and queries between two scrapes,
    and the server's own ``action`` counter."""
    kinds = actions.billable_actions(events)
    kinds["heartbeats"] += actions.requests(before, after, "RecordActivityTaskHeartbeat")
    kinds["queries"] += actions.requests(before, after, "QueryWorkflow")
    kinds = +kinds
    metric = actions.action_metric(before, after)
    return {
        "kinds": dict(kinds),
        "total": sum(kinds.values()),
        "metric": metric,
        "metric_total": sum(metric.values()),
    }


async def engine_turn(ctx: Ctx, engine: Engine, conversation: str) -> dict[str, Any]:
    """One next turn on a warm conversation: the events it added to the conversation's
    history, and its turn's, counted."""
    conv = ctx.client.get_workflow_handle(conversation)
    last = max((e.event_id for e in (await conv.fetch_history()).events), default=0)
    before = await asyncio.to_thread(scrape, ctx)
    started = await engine.turns.start(conversation, "weather?")
    assert started.turn_number is not None
    async for event in engine.turns.chunks(conversation, started.turn_number):
        if event.type == "turn-finish":
            break
    result = await engine.turns.result(conversation, started)
    await asyncio.sleep(1.0)  # the conversation's last workflow task
    after = await asyncio.to_thread(scrape, ctx)
    events = [e for e in (await conv.fetch_history()).events if e.event_id > last]
    turn = ctx.client.get_workflow_handle(started.workflow_id)
    events += list((await turn.fetch_history()).events)
    return {**counted(events, before, after), "steps": result.steps, "status": result.status}


async def measure_actions(ctx: Ctx, n: int) -> dict[str, Any]:
    engine = ctx.engines["default hooks"]
    out = {}
    for label, replies in (("1-step", [TEXT]), ("3-step", [TOOL, TOOL, TEXT])):
        samples = []
        for _ in range(n):
            ctx.mock.script(*(paced(fixture=f) for f in replies))
            samples.append(await engine_turn(ctx, engine, engine.conversations[0]))
        out[f"durable-turns, {label} turn"] = summary(samples)
    return out


async def peer_actions(ctx: Ctx, n: int) -> dict[str, Any]:
    """Each peer's 1-step and 3-step turn at its defaults (``bench.pace``'s workflows and
    client), counted from its workflow's history and the metrics."""
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from bench.pace import DEFAULTS, PEERS, Clock, openai_replies, peer_turn
    from bench.peers import VENV, ensure_venv
    from bench.stream_peers import peer_worker
    from testkit.llm_server import Reply

    why_not = await ensure_venv()
    labels = [f"{label}, {k}-step turn" for label, _ in PEERS.values() for k in (1, 3)]
    if why_not:
        return {
            label: {"error": f"the peers' venv is not available: {why_not}"} for label in labels
        }
    bare = await Client.connect(ctx.address, data_converter=pydantic_data_converter)
    reply = functools.partial(Reply, first_token_s=FIRST_TOKEN_S, tokens_per_s=TOKENS_PER_S)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TEMPORAL_ADDRESS": ctx.address,
        "ANTHROPIC_BASE_URL": ctx.mock.base_url,
        "OPENAI_BASE_URL": ctx.mock.openai_base_url,
    }
    out: dict[str, Any] = {}
    for peer, (label, wire) in PEERS.items():
        queue = f"cost-{peer}-{uuid.uuid4().hex[:6]}"
        python = str(VENV / "bin" / "python")
        log = ctx.tmp / f"{queue}.log"
        try:
            worker = await asyncio.to_thread(
                ready_worker,
                peer_worker(python, peer, queue, DEFAULTS.batch_ms, log, env, tools=True),
            )
        except Exception as e:
            for k in (1, 3):
                out[f"{label}, {k}-step turn"] = {"error": f"its worker did not start: {e}"[:300]}
            continue
        try:
            three = (
                openai_replies(reply)
                if wire == "openai"
                else [reply(TOOL), reply(TOOL), reply(TEXT)]
            )
            one = [reply("openai/responses_text.sse" if wire == "openai" else TEXT)]
            for k, replies in ((1, one), (3, three)):
                samples = []
                for _ in range(n):
                    ctx.mock.script(*(asdict(r) for r in replies))
                    seen = {w.id async for w in bare.list_workflows(f"TaskQueue='{queue}'")}
                    before = await asyncio.to_thread(scrape, ctx)
                    await peer_turn(bare, peer, queue, Clock(), DEFAULTS.poll_ms, responses=k)
                    await asyncio.sleep(1.0)
                    after = await asyncio.to_thread(scrape, ctx)
                    events: list[Any] = []
                    async for w in bare.list_workflows(f"TaskQueue='{queue}'"):
                        if w.id not in seen:
                            history = await bare.get_workflow_handle(w.id).fetch_history()
                            events += list(history.events)
                    samples.append(counted(events, before, after))
                out[f"{label}, {k}-step turn"] = summary(samples)
        except Exception as e:
            for k in (1, 3):
                out.setdefault(
                    f"{label}, {k}-step turn", {"error": f"{type(e).__name__}: {e}"[:300]}
                )
        finally:
            worker.stop()
    return out


# --- rows ---------------------------------------------------------------------------------------


def us(x: float) -> str:
    return f"{x:.0f} µs"


def cpu_rows(
    cpu: dict[str, Any], per_token: Any, targets: dict[str, float], args: Any
) -> list[Row]:
    """``per_token(cpu, system, process)``: that process's µs per token, one per round. A
    value is the median over rounds; a ratio is the median of the rounds' own ratios (a
    round's systems ran back to back, so a slower or faster minute of the machine moves
    both sides of it), its range beside it."""
    floor_rounds = per_token(cpu, "floor", "floor")
    floor = median(floor_rounds)
    rate = cpu["idle_rate"]
    rows = [
        Row(
            "cpu",
            "direct SDK loop: worker CPU per token",
            us(floor),
            "the floor",
            note="AsyncAnthropic.messages.create(stream=True) iterated to its end, the raw"
            f" stream the engine's provider reads too; {args.turns} streams of {args.tokens}"
            " tokens at once per round, in a process of its own, no Temporal",
        )
    ]
    for name in ("default hooks", "user on_chunk"):
        mine_rounds = per_token(cpu, name, name)
        mine = median(mine_rounds)
        ratios = [m / f for m, f in zip(mine_rounds, floor_rounds, strict=True)]
        ratio = median(ratios)
        rows.append(
            Row(
                "cpu",
                f"durable-turns, {name}: worker CPU per token",
                us(mine),
                f"direct SDK loop {us(floor)}",
                ratio,
                f"≤ {targets['worker']:g}×",
                judged(ratio, targets["worker"]),
                note=f"the median of {len(ratios)} rounds' ratios (each round's against its own"
                f" floor: {min(ratios):.2f}–{max(ratios):.2f}×; the medians' ratio"
                f" {mine / floor:.2f}×); idle {rate[name] * 1000:.1f} ms of CPU a second"
                " subtracted"
                + (" (on_chunk: bench.cost_hooks.CountChunks)" if "chunk" in name else ""),
            )
        )
    for name in ("default hooks", "user on_chunk"):
        server_rounds = per_token(cpu, name, "server")
        worker_rounds = per_token(cpu, name, name)
        server, worker = median(server_rounds), median(worker_rounds)
        ratio = median([s / w for s, w in zip(server_rounds, worker_rounds, strict=True)])
        rows.append(
            Row(
                "cpu",
                f"Temporal dev server CPU per token ({name})",
                us(server),
                f"its worker {us(worker)}",
                ratio,
                f"≤ {targets['server']:g}×",
                judged(ratio, targets["server"]),
                note=f"the server's idle {rate['server'] * 1000:.1f} ms of CPU a second"
                " subtracted (measured while the floor ran)"
                if name == "default hooks"
                else "",
            )
        )
    return rows


def heartbeat_rows(beats: dict[str, Any], long_step_s: float) -> list[Row]:
    default = beats["cancel marks (the default)"]
    step_s = default["step_s"] or long_step_s
    rows = [
        Row(
            "heartbeats",
            f"heartbeats per {step_s:.0f}-s step: cancel marks (the default)",
            str(default["sent"]),
            note=f"RecordActivityTaskHeartbeat requests the server got during the turn; the"
            f" last `beats` a describe showed: {default['beats_seen']}; turn {default['status']}",
        )
    ]
    old = beats.get("no cancel marks (the former scheme)")
    if old:
        ratio = default["sent"] / max(old["sent"], 1)
        rows.append(
            Row(
                "heartbeats",
                f"heartbeats per {old['step_s']:.0f}-s step: no cancel marks (the former"
                " scheme, still used where no mark can be watched)",
                str(old["sent"]),
                f"default {default['sent']}",
                ratio,
                note=f"TURNS_CHUNK_STREAM_URL=none; `beats` seen: {old['beats_seen']}",
            )
        )
    computed = math.floor(step_s * OLD_BEATS_PER_S)
    rows.append(
        Row(
            "heartbeats",
            f"computed: one heartbeat every 250 ms over {step_s:.0f} s",
            str(computed),
            f"default {default['sent']}",
            default["sent"] / max(computed, 1),
            note="the scheme issue 36 describes (4 a second), computed, not measured",
        )
    )
    return rows


def action_rows(ours: dict[str, Any], peers: dict[str, Any] | None, no_peers: bool) -> list[Row]:
    rows = []
    for label, found in ours.items():
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(found["median_kinds"].items()))
        rows.append(
            Row(
                "actions",
                f"{label}: billable actions",
                f"{found['total']:g}",
                f"server's action metric {found['metric_total']:g}",
                note=kinds,
            )
        )
    three = ours["durable-turns, 3-step turn"]["total"]
    peer_totals = {
        label: found["total"]
        for label, found in (peers or {}).items()
        if "error" not in found and label.endswith("3-step turn")
    }
    for label, found in (peers or {}).items():
        if "error" in found:
            rows.append(Row("actions", f"{label}: billable actions", "—", status="not measured",
                            note=found["error"]))  # fmt: skip
            continue
        mine = ours[f"durable-turns, {label.rsplit(', ', 1)[1]}"]["total"]
        rows.append(
            Row(
                "actions",
                f"{label}: billable actions",
                f"{found['total']:g}",
                f"durable-turns {mine:g}",
                mine / max(found["total"], 1),
                "ours < theirs",
                "met" if mine < found["total"] else "MISSED",
                note=", ".join(f"{k} {v}" for k, v in sorted(found["median_kinds"].items()))
                + f"; server's action metric {found['metric_total']:g}",
            )
        )
    if no_peers:
        rows.append(Row("actions", "the peers' actions", "—", status="not measured",
                        note="run without the peers (--no-peers)"))  # fmt: skip
    cost = three * PRICE_PER_MILLION
    rows.append(
        Row(
            "actions",
            "Temporal Cloud cost of 1M 3-step turns",
            f"${cost:,.0f}",
            ", ".join(
                f"{k.split(',')[0]} ${v * PRICE_PER_MILLION:,.0f}" for k, v in peer_totals.items()
            ),
            note=f"{three:g} actions a turn × ${PRICE_PER_MILLION:g} per million actions (Temporal"
            " Cloud's first tier, the first 5M actions of a month; volume tiers go down to $25)",
        )
    )
    return rows
