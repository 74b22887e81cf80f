"""6 · Peers side by side: pydantic-ai's and the OpenAI Agents SDK's Temporal integrations.

The peers are installed into their own virtual environment outside the repository
(``~/.cache/durable-turns-bench/peers-venv``, or ``$DURABLE_TURNS_BENCH_PEERS_VENV``), with
the same temporalio as the project, and run in a subprocess of it (``bench/peers_run.py``)
against the same dev server. While a peer runs, the engine's in-process worker keeps
serving, so the peer process times engine turns and peer turns alternately. Both get the
same scripted model behaviour (1 step; 5 steps = 4 tool calls) and the same prior
conversation (1K and 100K tokens) for the history bytes of one model step.

A peer that cannot be installed or run gets a row saying why; the benchmark goes on.
"""

from __future__ import annotations

import asyncio
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import history
from bench.common import ROOT, Bench, Row, kb, median, ms, script, tool_steps

VENV = Path(
    os.environ.get("DURABLE_TURNS_BENCH_PEERS_VENV")
    or Path.home() / ".cache" / "durable-turns-bench" / "peers-venv"
)
PEERS = {
    "pydantic-ai": ["pydantic-ai-slim[temporal]==2.68.0"],
    "openai-agents": ["openai-agents==0.22.3", "temporalio-openai-agents==1.1.0"],
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


async def run_peer(b: Bench, peer: str, models: dict[int, str], samples: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    code, out, err = await sh(
        str(VENV / "bin" / "python"),
        "-m",
        "bench.peers_run",
        peer,
        "--address",
        b.address,
        "--engine-queue",
        b.engine_queue,
        "--engine-model-1",
        models[1],
        "--engine-model-5",
        models[5],
        "--samples",
        str(samples),
        limit_s=600,
        env=env,
    )
    for line in out.splitlines():
        if line.startswith("RESULT "):
            import json

            return dict(json.loads(line[len("RESULT ") :]))
    tail = [x for x in err.strip().splitlines() if x.strip()][-3:]
    raise RuntimeError(f"exit {code}: {' / '.join(tail)[-500:]}")


def side_by_side(engine_hist: dict[str, dict[str, int]], results: dict[str, Any]) -> str:
    ok = {p: r for p, r in results.items() if "error" not in r}
    engine_lat = {
        s: median(x for r in ok.values() for x in r["latency"][s]["samples"]["engine"])
        for s in ("1", "5")
    }
    head = "| same run, same server | durable-turns | " + " | ".join(ok) + " |"
    lines = [head, "|---" * (2 + len(ok)) + "|"]
    for s in ("1", "5"):
        cells = [ms(r["latency"][s]["peer_s"]) for r in ok.values()]
        label = "turn latency, 1 step" if s == "1" else "turn latency, 5 steps (4 tool calls)"
        lines.append(f"| {label} | {ms(engine_lat[s])} | " + " | ".join(cells) + " |")
    for t in ("1000", "100000"):
        cells = [f"{r['history'][t]['step_bytes']:,.0f} B" for r in ok.values()]
        lines.append(
            f"| history per model step, {int(t) // 1000}K-token conversation"
            f" | {engine_hist[t]['step_bytes']:,} B | " + " | ".join(cells) + " |"
        )
        cells = [kb(r["history"][t]["turn_bytes"]) for r in ok.values()]
        lines.append(
            f"| whole turn history, {int(t) // 1000}K-token conversation"
            f" | {kb(engine_hist[t]['turn_bytes'])} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


async def run(b: Bench) -> tuple[list[Row], dict[str, Any]]:
    models = {s: script(b.tmp, f"peers-{s}", tool_steps(s)) for s in (1, 5)}
    engine_hist = {}
    hist_model = script(b.tmp, "peers-history", [{"text": "Noted."}])
    for tokens in (1_000, 100_000):
        engine_hist[str(tokens)] = await history.measure(b, tokens, hist_model)
    results: dict[str, Any] = {}
    why_not = await ensure_venv()
    for peer in PEERS:
        if why_not:
            results[peer] = {"error": why_not}
            continue
        try:
            results[peer] = await run_peer(b, peer, models, b.n(10, 2))
        except Exception as e:
            results[peer] = {"error": str(e) or type(e).__name__}

    rows = []
    for peer, r in results.items():
        if "error" in r:
            rows.append(Row("6", f"{peer}: not run", "—", note=r["error"]))
            continue
        version = ", ".join(f"{k} {v}" for k, v in r["versions"].items())
        for s in ("1", "5"):
            lat = r["latency"][s]
            rows.append(
                Row(
                    "6",
                    f"{peer}: turn latency, {s} step{'s' if s == '5' else ''}",
                    ms(lat["peer_s"]),
                    f"durable-turns {ms(lat['engine_s'])} (alternating)",
                    lat["engine_s"] / lat["peer_s"],
                    note=f"{version}. Ratio = durable-turns ÷ peer. A durable-turns turn is an"
                    " update on the conversation workflow, a child turn workflow and begin/finish"
                    " activities that persist to the store; a peer turn is one workflow running"
                    " the agent, with the conversation passed in"
                    if s == "1"
                    else "",
                )
            )
        lat1, lat5 = r["latency"]["1"], r["latency"]["5"]
        peer_step = (lat5["peer_s"] - lat1["peer_s"]) / 4
        engine_step = (lat5["engine_s"] - lat1["engine_s"]) / 4
        rows.append(
            Row(
                "6",
                f"{peer}: added latency per extra step (model step + tool call)",
                ms(peer_step),
                f"durable-turns {ms(engine_step)}",
                engine_step / peer_step,
            )
        )
        for t in ("1000", "100000"):
            h, eng = r["history"][t], engine_hist[t]
            rows.append(
                Row(
                    "6",
                    f"{peer}: history per model step, {int(t) // 1000}K-token conversation",
                    f"{h['step_bytes']:,.0f} B",
                    f"durable-turns {eng['step_bytes']:,} B; whole turn {kb(h['turn_bytes'])}"
                    f" vs {kb(eng['turn_bytes'])}",
                    eng["step_bytes"] / h["step_bytes"],
                )
            )
    raw: dict[str, Any] = {"engine_history": engine_hist, "peers": results}
    if any("error" not in r for r in results.values()):
        raw["table_md"] = side_by_side(engine_hist, results)
    return rows, raw
