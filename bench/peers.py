"""6 · Peers side by side: the OpenAI Agents SDK's and pydantic-ai's Temporal integrations.

The peers are installed into their own virtual environment outside the repository
(``~/.cache/durable-turns-bench/peers-venv``, or ``$DURABLE_TURNS_BENCH_PEERS_VENV``), with
the same temporalio as the project. One driver process of that venv (``bench/peers_run.py``)
is the client of every system, against the same dev server, in the same run: the outside
floor (one workflow per turn, a no-op activity per model step and per tool call), the
contract floor (the same no-op turns in the shape of the wire contract: an update on a
conversation workflow runs each as a child workflow and answers with its result), each peer,
and durable-turns (next turn of a conversation, first turn of a new one, next turn by
``startTurn`` + the turn's result), each on a worker process of its own so its CPU is its
own. All get the same scripted model behaviour (1 step; 5 steps = 4 tool calls; 3 steps =
2 tool calls for the bursts). The issue's table goes into ``raw["table_md"]``, with rows
for its targets against the OpenAI Agents SDK; then the history bytes of one model step
with 1K and 100K tokens of prior conversation (durable-turns' by the in-process worker).

Without the peers' venv the driver runs on this interpreter and measures the floor and
durable-turns only; a peer that cannot be installed or run gets a row saying why.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import history
from bench.common import ROOT, Bench, Row, judged, kb, ms, script, tool_steps

VENV = Path(
    os.environ.get("DURABLE_TURNS_BENCH_PEERS_VENV")
    or Path.home() / ".cache" / "durable-turns-bench" / "peers-venv"
)
PEERS = {
    "openai-agents": ["openai-agents==0.22.3", "temporalio-openai-agents==1.1.0"],
    "pydantic-ai": ["pydantic-ai-slim[temporal,anthropic,openai]==2.68.0"],
}


def requirements() -> list[str]:
    return [f"temporalio=={metadata.version('temporalio')}"] + [
        r for rs in PEERS.values() for r in rs
    ]


async def sh(*cmd: str, limit_s: float, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run a command without blocking the event loop (the engine worker keeps serving)."""
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit_s)
    except TimeoutError:
        return -1, "", f"timed out after {limit_s:.0f} s"
    finally:
        if proc.returncode is None:  # timed out, or the benchmark was stopped
            proc.terminate()  # the driver stops the worker processes it started
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), 30)
            except (TimeoutError, asyncio.CancelledError):
                proc.kill()
                await proc.wait()
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


async def ensure_venv() -> str | None:
    """Create/update the peers' venv; returns None when ready, else why not."""
    python, stamp = VENV / "bin" / "python", VENV / ".bench-requirements"
    wanted = "\n".join(requirements())
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return None
    print(f"  installing the peers into {VENV} (first run only) …", flush=True)
    if not python.exists():
        code, _, err = await sh(sys.executable, "-m", "venv", str(VENV), limit_s=120)
        if code:
            return f"cannot create {VENV}: {err.strip()[-300:]}"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    code, _, err = await sh(*pip, *requirements(), limit_s=600)
    if code:
        lines = [x for x in err.splitlines() if "ERROR" in x or "error" in x] or err.splitlines()
        return f"pip install failed: {' / '.join(lines[-3:])[-400:]}"
    stamp.write_text(wanted)
    return None


SIZES = {
    # warm-up and measured rounds of latency; CPU rounds × turns per batch; burst size × bursts
    "quick": {
        "warmup": 1,
        "samples": 3,
        "cpu_rounds": 1,
        "cpu_turns": 10,
        "burst": 20,
        "bursts": 1,
    },
    "full": {
        "warmup": 2,
        "samples": 15,
        "cpu_rounds": 3,
        "cpu_turns": 10,
        "burst": 100,
        "bursts": 3,
    },
}
LIMIT_S = 900
"""The driver's time limit (section 6's own in ``bench/__main__.py`` is longer)."""

TARGETS = {
    "next": 1.25,  # 1-step next turn ≤ 1.25× OpenAI Agents
    "first_ms": 25,  # first turn ≤ OpenAI Agents + 25 ms
    "step": 1.2,  # per extra step ≤ 1.2× the outside floor's
    "cpu": 1.0,  # worker CPU per 1-step turn ≤ OpenAI Agents'
    "throughput": 0.9,  # ≥ 0.9× OpenAI Agents' turns/s
}
OPENAI = "openai-agents"
FLOOR_ROWS = ("floor", "contract-floor", "contract-floor-first")
ENGINE_ROWS = ("engine-next", "engine-first", "engine-start", "engine-direct")

LABELS = {
    "floor": "bare Temporal: one workflow per turn, a no-op activity per model step and per"
    " tool call (the outside floor)",
    "contract-floor": "bare Temporal in the wire contract's shape: an update on a conversation"
    " workflow runs each turn (the same no-op activities) as a child workflow and answers with"
    " its result (the contract floor)",
    "contract-floor-first": "the contract floor, first turn of a new conversation"
    " (update-with-start starts the conversation workflow; no store to open)",
    "openai-agents": "OpenAI Agents SDK + Temporal plugin",
    "pydantic-ai": "pydantic-ai + Temporal",
    "engine-next": "durable-turns, next turn of a conversation",
    "engine-first": "durable-turns, first turn of a new conversation",
    "engine-start": "durable-turns, next turn, startTurn + turn result",
    "engine-direct": "what-if: durable-turns' TurnWorkflow started by the client, no"
    " conversation workflow (no queue, no turn lock)",
}
CPU_NOTE = (
    "worker CPU = utime + stime of the system's own worker process (/proc/<pid>/stat) from"
    " just before a batch of sequential 1-step turns to 0.1 s after it, ÷ turns; never the"
    " Temporal server's nor the client's (one driver process is the client of all). Floors:"
    " `python -m bench.floor` (FloorTurn + the no-op activity; the contract floor adds"
    " FloorConversation, on the same worker process, measured in separate batches). Peers:"
    " `python -m bench.peer_worker` (the peer's temporalio worker with its plugin: the workflow"
    " running the agent, the model activity with the scripted model, the tool activity)."
    " durable-turns:"
    " `python worker.py` (conversation and turn workflows, plain unless TURNS_WORKFLOW_SANDBOX=on;"
    " the begin/model/tool/"
    "finish activities, the SQLite transcript store, the live chunk stream); its four rows"
    " share one worker process, measured in separate batches"
)


async def run_driver(b: Bench, peers: list[str], python: str) -> dict[str, Any]:
    """``bench.peers_run`` in the peers' venv (or this interpreter when there are no peers)."""
    models = {s: script(b.tmp, f"peers-{s}", tool_steps(s)) for s in (1, 3, 5)}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    sizes = SIZES["quick" if b.quick else "full"]
    cmd = [python, "-m", "bench.peers_run", "--address", b.address, "--tmp", str(b.tmp)]
    cmd += ["--project-python", sys.executable, "--peers", ",".join(peers)]
    cmd += [a for s in (1, 3, 5) for a in (f"--engine-model-{s}", models[s])]
    cmd += [a for k, v in sizes.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    code, out, err = await sh(*cmd, limit_s=LIMIT_S, env=env)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT ") :]))
    tail = [x for x in err.strip().splitlines() if x.strip()][-3:]
    raise RuntimeError(f"exit {code}: {' / '.join(tail)[-500:]}")


def lat(system: dict[str, Any] | None, steps: str) -> float | None:
    if not system or "latency" not in system or not system["latency"][steps]["samples"]:
        return None
    return float(system["latency"][steps]["median_s"])


def per_step(system: dict[str, Any] | None) -> float | None:
    one, five = lat(system, "1"), lat(system, "5")
    return None if one is None or five is None else (five - one) / 4


def cpu(system: dict[str, Any] | None) -> float | None:
    return float(system["cpu"]["per_turn_s"]) if system and "cpu" in system else None


def rate(system: dict[str, Any] | None) -> float | None:
    tp = (system or {}).get("throughput")
    return float(tp["turns_per_s"]) if tp else None


def table(result: dict[str, Any], engine_hist: dict[str, dict[str, int]]) -> str:
    systems, burst = result["systems"], result["sizes"]["burst"]

    def cell(value: float | None, fmt: str = "ms") -> str:
        if value is None:
            return "—"
        return ms(value) if fmt == "ms" else f"{value:.1f} turns/s"

    head = (
        "| same run | 1-step turn | 5-step turn | per extra step | worker CPU per 1-step turn"
        f" | {burst} concurrent 3-step turns |"
    )
    lines = [head, "|---|---|---|---|---|---|"]
    for name in [*FLOOR_ROWS, *result["peers"], *ENGINE_ROWS]:
        s = systems.get(name)
        if s is None:
            continue
        cells = [cell(lat(s, "1")), cell(lat(s, "5")), cell(per_step(s)), cell(cpu(s))]
        which = {
            "engine-next": "existing",
            "engine-first": "new",
            "contract-floor": "existing",
            "contract-floor-first": "new",
        }.get(name)
        cells.append(cell(rate(s), "rate") + (f", {which} conversations" if which else ""))
        label = LABELS[name]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    sizes = result["sizes"]
    lines += [
        "",
        f"Latency: medians of {sizes['samples']} turns per system after {sizes['warmup']}"
        " warm-up round(s), one turn of each system after the other (the order rotating);"
        " client send → result. 5 steps = 4 tool calls; per extra step = (5-step − 1-step) ÷ 4."
        f" Throughput: {burst} turns at once (2 tool calls each), median of"
        f" {sizes['bursts']} burst(s) per system, each system on a fresh worker process of its"
        " own, bursts alternating. The engine's turns go over the wire only (plain temporalio"
        " Client, JSON, update-with-start `sendMessage`, or `startTurn` and the turn"
        f" workflow's result). CPU: {sizes['cpu_rounds']} round(s) of {sizes['cpu_turns']}"
        f" sequential 1-step turns per system; {CPU_NOTE}.",
    ]
    ok = {
        p: result["history"][p]
        for p in result["peers"]
        if "error" not in result["history"].get(p, {"error": 1})
    }
    if ok:
        lines += ["", "| history, same run | durable-turns | " + " | ".join(ok) + " |"]
        lines.append("|---" * (2 + len(ok)) + "|")
        for t in ("1000", "100000"):
            cells = [f"{h[t]['step_bytes']:,.0f} B" for h in ok.values()]
            lines.append(
                f"| per model step, {int(t) // 1000}K-token conversation"
                f" | {engine_hist[t]['step_bytes']:,} B | " + " | ".join(cells) + " |"
            )
            cells = [kb(h[t]["turn_bytes"]) for h in ok.values()]
            lines.append(
                f"| whole turn, {int(t) // 1000}K-token conversation"
                f" | {kb(engine_hist[t]['turn_bytes'])} | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines)


def target_rows(result: dict[str, Any]) -> list[Row]:
    """The issue's targets: durable-turns against the OpenAI Agents SDK and the floor."""
    systems, burst = result["systems"], result["sizes"]["burst"]
    oa = systems.get(OPENAI)
    nxt, first, start = (systems.get(k) for k in ("engine-next", "engine-first", "engine-start"))
    rows: list[Row] = []
    oa1 = lat(oa, "1")
    if oa1 is not None:
        t = TARGETS["next"]
        for label, s in (("sendMessage", nxt), ("startTurn + turn result", start)):
            if (v := lat(s, "1")) is not None:
                rows.append(
                    Row(
                        "6",
                        f"durable-turns: next turn, 1 step ({label})",
                        ms(v),
                        f"OpenAI Agents {ms(oa1)}",
                        v / oa1,
                        f"≤ {t}× OpenAI Agents",
                        judged(v / oa1, t),
                    )
                )
        if (v := lat(first, "1")) is not None:
            limit = oa1 + TARGETS["first_ms"] / 1000
            rows.append(
                Row(
                    "6",
                    "durable-turns: first turn of a new conversation, 1 step",
                    ms(v),
                    f"OpenAI Agents {ms(oa1)}; +{TARGETS['first_ms']} ms = {ms(limit)}",
                    v / oa1,
                    f"≤ OpenAI Agents + {TARGETS['first_ms']} ms",
                    judged(v, limit),
                    note="a fresh conversation id each time: update-with-start starts the"
                    " conversation workflow (its open activity), then the turn",
                )
            )
    direct = systems.get("engine-direct")
    if oa1 is not None and (v := lat(direct, "1")) is not None:
        d_cpu, oa_cpu = cpu(direct), cpu(oa)
        rows.append(
            Row(
                "6",
                "what-if: the TurnWorkflow started by the client, no conversation, 1 step",
                ms(v),
                f"OpenAI Agents {ms(oa1)}",
                v / oa1,
                note="what the turn costs without the conversation's hop: a client starts it"
                " (docs/clients.md), so nothing queues turns, holds the turn lock or numbers"
                " them; a new conversation id each time"
                + (
                    f"; worker CPU {ms(d_cpu)} per turn ({d_cpu / oa_cpu:.2f}× OpenAI Agents)"
                    if d_cpu and oa_cpu
                    else ""
                ),
            )
        )
    floor_step, engine_step = per_step(systems.get("floor")), per_step(nxt)
    if floor_step is not None and engine_step is not None:
        t = TARGETS["step"]
        rows.append(
            Row(
                "6",
                "durable-turns: added latency per extra step (next turn)",
                ms(engine_step),
                f"outside floor {ms(floor_step)}",
                engine_step / floor_step,
                f"≤ {t}× outside floor",
                judged(engine_step / floor_step, t),
                note="(5-step − 1-step) ÷ 4; the floor's extra step is 2 no-op activities",
            )
        )
    oa_cpu = cpu(oa)
    if oa_cpu:
        for label, s in (("next turn", nxt), ("first turn", first)):
            if (v := cpu(s)) is not None:
                rows.append(
                    Row(
                        "6",
                        f"durable-turns: worker CPU per 1-step turn ({label})",
                        ms(v),
                        f"OpenAI Agents {ms(oa_cpu)}; floor {ms(cpu(systems.get('floor')) or 0)}",
                        v / oa_cpu,
                        "≤ OpenAI Agents",
                        judged(v / oa_cpu, TARGETS["cpu"]),
                        note=CPU_NOTE if label == "next turn" else "",
                    )
                )
    oa_rate = rate(oa)
    if oa_rate:
        t = TARGETS["throughput"]
        for label, s in (("new conversations", first), ("existing conversations", nxt)):
            if (v := rate(s)) is not None:
                tp = s["throughput"] if s else {}
                rows.append(
                    Row(
                        "6",
                        f"durable-turns: {burst} concurrent 3-step turns, {label}",
                        f"{v:.1f} turns/s",
                        f"OpenAI Agents {oa_rate:.1f} turns/s",
                        v / oa_rate,
                        f"≥ {t}× OpenAI Agents",
                        "met" if v / oa_rate >= t else "MISSED",
                        note=(
                            f"p50 {ms(tp['p50_s'])}, p95 {ms(tp['p95_s'])};"
                            f" worker CPU {ms(tp['worker_cpu_per_turn_s'])} per turn"
                            + (f"; {tp['failed']} turn(s) failed" if tp["failed"] else "")
                            + (
                                "; each conversation had one turn before (untimed)"
                                if label.startswith("existing")
                                else ""
                            )
                        ),
                    )
                )
    return rows


CONTRACT_NOTE = (
    "what any implementation of the wire contract (DESIGN.md §4) pays on this server before it"
    " does any work of its own: an update on the conversation workflow, a child workflow per"
    " turn, the update answering with the turn's result; no-op activities, no store, no hooks."
    " Where this ratio passes the target's, the target is below what the contract itself costs"
)


def contract_rows(result: dict[str, Any]) -> list[Row]:
    """The contract floor against the OpenAI Agents SDK: what the wire contract's shape costs
    on bare Temporal, so which targets no implementation of the contract can meet here."""
    systems, burst = result["systems"], result["sizes"]["burst"]
    oa, outside = systems.get(OPENAI), systems.get("floor")
    oa1, oa_cpu, oa_rate = lat(oa, "1"), cpu(oa), rate(oa)
    rows: list[Row] = []
    for key, turn, target in (
        ("contract-floor", "next turn", f"≤ {TARGETS['next']}× OpenAI Agents"),
        ("contract-floor-first", "first turn", f"≤ OpenAI Agents + {TARGETS['first_ms']} ms"),
    ):
        contract = systems.get(key)
        c1 = lat(contract, "1")
        if oa1 is not None and c1 is not None:
            rows.append(
                Row(
                    "6",
                    f"contract floor: {turn}, 1 step (bare Temporal, the wire contract's shape)",
                    ms(c1),
                    f"OpenAI Agents {ms(oa1)}; outside floor {ms(lat(outside, '1') or 0)}",
                    c1 / oa1,
                    note=(CONTRACT_NOTE + "; " if turn == "next turn" else "")
                    + f"the {turn} target: {target}",
                )
            )
        c_cpu = cpu(contract)
        if oa_cpu and c_cpu is not None:
            rows.append(
                Row(
                    "6",
                    f"contract floor: worker CPU per 1-step turn ({turn})",
                    ms(c_cpu),
                    f"OpenAI Agents {ms(oa_cpu)}; outside floor {ms(cpu(outside) or 0)}",
                    c_cpu / oa_cpu,
                )
            )
        c_rate = rate(contract)
        if oa_rate and c_rate is not None:
            which = "existing" if turn == "next turn" else "new"
            rows.append(
                Row(
                    "6",
                    f"contract floor: {burst} concurrent 3-step turns, {which} conversations",
                    f"{c_rate:.1f} turns/s",
                    f"OpenAI Agents {oa_rate:.1f} turns/s; outside floor {rate(outside) or 0:.1f}",
                    c_rate / oa_rate,
                )
            )
    return rows


def peer_rows(result: dict[str, Any], engine_hist: dict[str, dict[str, int]]) -> list[Row]:
    """Per peer: its latency against durable-turns' next turn (alternating), history bytes."""
    systems, rows = result["systems"], []
    engine = systems.get("engine-next")
    for peer in result["peers"]:
        s = systems.get(peer, {})
        version = ", ".join(f"{k} {v}" for k, v in result["versions"].get(peer, {}).items())
        if "error" in s:
            rows.append(Row("6", f"{peer}: failed", "—", note=f"{version}. {s['error']}"))
        for steps in ("1", "5"):
            p, e = lat(s, steps), lat(engine, steps)
            if p is None or e is None:
                continue
            rows.append(
                Row(
                    "6",
                    f"{peer}: turn latency, {steps} step{'s' if steps == '5' else ''}",
                    ms(p),
                    f"durable-turns {ms(e)} (alternating)",
                    e / p,
                    note=f"{version}. Ratio = durable-turns ÷ peer. A durable-turns turn is an"
                    " update on the conversation workflow, a child turn workflow and begin/finish"
                    " activities that persist to the store; a peer turn is one workflow running"
                    " the agent, with the conversation passed in"
                    if steps == "1"
                    else "",
                )
            )
        p_step, e_step = per_step(s), per_step(engine)
        if p_step and e_step is not None:
            rows.append(
                Row(
                    "6",
                    f"{peer}: added latency per extra step (model step + tool call)",
                    ms(p_step),
                    f"durable-turns {ms(e_step)}",
                    e_step / p_step,
                )
            )
        h = result["history"].get(peer, {})
        if "error" in h:
            rows.append(Row("6", f"{peer}: history not measured", "—", note=h["error"]))
            continue
        for t in ("1000", "100000"):
            if t not in h:
                continue
            eng = engine_hist[t]
            rows.append(
                Row(
                    "6",
                    f"{peer}: history per model step, {int(t) // 1000}K-token conversation",
                    f"{h[t]['step_bytes']:,.0f} B",
                    f"durable-turns {eng['step_bytes']:,} B; whole turn {kb(h[t]['turn_bytes'])}"
                    f" vs {kb(eng['turn_bytes'])}",
                    eng["step_bytes"] / h[t]["step_bytes"],
                )
            )
    return rows


async def run(b: Bench) -> tuple[list[Row], dict[str, Any]]:
    engine_hist = {}
    hist_model = script(b.tmp, "peers-history", [{"text": "Noted."}])
    for tokens in (1_000, 100_000):
        engine_hist[str(tokens)] = await history.measure(b, tokens, hist_model)
    why_not = await ensure_venv()
    peers = [] if why_not else list(PEERS)
    python = sys.executable if why_not else str(VENV / "bin" / "python")
    result = await run_driver(b, peers, python)
    rows: list[Row] = []
    for peer in PEERS:
        if peer not in result["peers"]:
            rows.append(
                Row("6", f"{peer}: not run", "—", note=why_not or result["errors"].get(peer, "?"))
            )
    for name, s in result["systems"].items():
        for key in ("error", "throughput_error"):
            if key in s and name not in PEERS:
                rows.append(Row("6", f"{LABELS[name]}: failed", "—", note=s[key]))
    rows += target_rows(result) + contract_rows(result) + peer_rows(result, engine_hist)
    raw: dict[str, Any] = {"engine_history": engine_hist, **result}
    raw["table_md"] = table(result, engine_hist)
    return rows, raw
