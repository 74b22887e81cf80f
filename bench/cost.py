"""What streaming costs: worker and server CPU per token, heartbeats per long step, and
Temporal Cloud's billable actions per turn, in one run against a dev server of its own.

    python -m bench.cost [--tokens 1000] [--turns 6] [--rounds 3] [--long-step-s 20]
                         [--action-turns 5] [--no-peers] [--only cpu|heartbeats|actions]
                         [--loop-coalesce-ms N]

The model is the replay server (``testkit/llm_server.py``, a process of its own) at a real
model's pace: the first token 400 ms after the request, then 60 tokens a second, each token
one Anthropic text delta. Four systems, each a process of its own:

* **the direct SDK loop** (the floor): ``AsyncAnthropic.messages.create(stream=True)``, the
  raw stream the engine's provider reads too, iterated to its end (``python -m bench.cost
  floor``, no Temporal);
* **durable-turns, default hooks** and **durable-turns, a user ``on_chunk``**
  (``bench.cost_hooks.CountChunks``): ``python worker.py`` each, its own task queue, SQLite
  store and chunk stream; the client starts a next turn on each of ``--turns`` warm
  conversations at once (``TurnsClient.start``), follows its chunks to ``turn-finish`` and
  awaits its result.

**CPU per token**: per round, each system streams ``--turns`` × ``--tokens`` tokens at once;
the user + system CPU of its process (``/proc``) over that time, minus the process's idle
CPU over the same wall time, ÷ the tokens. A process's idle rate is the median of its rates
while the others ran (the workers' and the server's during the floor's rounds, where no
turn runs). The dev server's CPU over the engine's rounds, minus its idle, ÷ tokens, beside
the worker's. Medians over ``--rounds`` rounds, the order rotating; a ratio is the median of
the rounds' own ratios (a round's systems run back to back), with their range.
``--loop-coalesce-ms N`` sets both workers' ``TURNS_LOOP_COALESCE_MS`` (``0``: every event
wakes the worker's loop at once; unset: the default), to compare a run with and without it.

**Heartbeats per long step**: one turn whose one step streams for ``--long-step-s`` seconds,
on the default worker, then on a worker whose steps cannot watch a cancel mark
(``TURNS_CHUNK_STREAM_URL=none``: the heartbeat scheme every step used before cancel marks).
Counted as the server's ``RecordActivityTaskHeartbeat`` requests (``service_requests``
metric) over the turn, and as the last ``beats`` detail ``describe`` showed while it ran.

**Billable actions per turn**: a 1-step and a 3-step paced turn (``get_weather`` twice, then
text) on a warm conversation, ``--action-turns`` each: the events the turn added to the
conversation's history and the turn's whole history, counted by ``bench.actions.RULES``,
plus heartbeats and queries from the request metrics; the server's own ``action`` counter
over the same turn beside it. The peers (``bench.stream_peers``' workflows, each in a worker
of the peers' venv, at their defaults) the same way, unless ``--no-peers``. Writes
``bench/results/cost.md`` and ``.json``; ``--only PART`` measures one part (its results say
so; ``--only actions --out cost-actions``, a minute or two, is how
``bench/results/cost-actions.md`` was made).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench import actions
from bench.common import (
    ROOT,
    ReplayServer,
    Row,
    WorkerProcess,
    cpu_seconds,
    free_port,
    loadavg,
    median,
    render_text,
    run_meta,
    start_engine_worker,
    temporal_server,
    write_results,
)
from bench.cost_run import (
    Ctx,
    Engine,
    action_rows,
    cpu_rows,
    heartbeat_rows,
    measure_actions,
    measure_heartbeats,
    paced,
    peer_actions,
)
from bench.scale import TOKEN

MODEL = "claude-sonnet-4-5"
TOKENS_PER_S = 60.0
TARGETS = {"worker": 2.0, "server": 0.2}
"""Issue 36: worker CPU per token ≤ 2× the direct SDK loop's; the server's ≤ 0.2× the
worker's."""
FLOOR_READY = "cost floor ready"


# --- the floor: the direct SDK loop in a process of its own -------------------------------------


async def sdk_text_deltas(sdk: Any) -> AsyncIterator[str]:
    """One raw stream of the mock's reply through ``anthropic.AsyncAnthropic``: its text
    deltas, as the direct SDK loop (the floor) reads them."""
    events = await sdk.messages.create(
        model=MODEL,
        max_tokens=4096,
        messages=[{"role": "user", "content": "Tell me a story."}],
        stream=True,
    )
    async for event in events:
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            yield event.delta.text


def floor_main(base_url: str) -> None:
    """``python -m bench.cost floor BASE_URL``: per line ``N`` on stdin, N concurrent raw
    streams of the mock's reply; answers ``DONE <text deltas>``."""
    import anthropic

    async def one(sdk: Any) -> int:
        return len([text async for text in sdk_text_deltas(sdk)])

    with asyncio.Runner() as runner:
        sdk = anthropic.AsyncAnthropic(base_url=base_url, api_key="bench-key", max_retries=0)
        print(FLOOR_READY, flush=True)
        for line in sys.stdin:

            async def streams(n: int = int(line)) -> list[int]:
                return await asyncio.gather(*(one(sdk) for _ in range(n)))

            print(f"DONE {sum(runner.run(streams()))}", flush=True)


class Floor:
    """The floor's process: ``run(n)`` streams n at once and returns the deltas."""

    def __init__(
        self,
        base_url: str,
        tmp: Path,
        argv: list[str] | None = None,
        ready: str = FLOOR_READY,
    ) -> None:
        """``argv``: another floor's command (this module's by default), which prints
        ``ready`` once it serves."""
        self.log = open(tmp / "floor.log", "ab")  # closed in stop()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-m", "bench.cost", "floor", base_url],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.proc.stdout is not None
        if ready not in self.proc.stdout.readline():
            raise RuntimeError("the floor's process did not start: see floor.log")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def run(self, n: int) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        if not answer or answer[0] != "DONE":
            raise RuntimeError(f"the floor answered {answer!r}")
        return int(answer[1])

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        if self.proc.poll() is None:
            self.proc.kill()
        self.log.close()


# --- CPU per token ------------------------------------------------------------------------------


async def engine_round(turns: Any, conversations: list[str]) -> int:
    """A next turn on each conversation at once, followed to its end; tokens received."""

    async def one(conversation: str) -> int:
        started = await turns.start(conversation, "Tell me a story.")
        assert started.turn_number is not None
        got = 0
        async for event in turns.chunks(conversation, started.turn_number):
            if event.type == "chunk" and event.data.get("type") == "text-delta":
                got += len(TOKEN.findall(event.data.get("text", "")))
            elif event.type == "turn-finish":
                break
        result = await turns.result(conversation, started)
        if result.status != "completed":
            raise RuntimeError(f"a turn ended {result.status}: {result.error}")
        return got

    return sum(await asyncio.gather(*(one(c) for c in conversations)))


async def cpu_phase(ctx: Ctx, floor: Floor, rounds: int, turns_n: int) -> dict[str, Any]:
    """Rotating rounds of the floor and both engine workers; every process's CPU per round."""
    systems = ["floor", *ctx.engines]
    pids = {"floor": floor.pid, "server": ctx.server_pid}
    pids |= {name: e.worker.pid for name, e in ctx.engines.items()}
    samples: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    idle: dict[str, list[float]] = {p: [] for p in pids}
    for i in range(rounds + 1):  # the first round warms up
        k = i % len(systems)
        for system in systems[k:] + systems[:k]:
            before = {p: cpu_seconds(pid) for p, pid in pids.items()}
            began = time.monotonic()
            if system == "floor":
                tokens = await asyncio.to_thread(floor.run, turns_n)
            else:
                engine = ctx.engines[system]
                tokens = await engine_round(engine.turns, engine.conversations)
            await asyncio.sleep(0.3)  # the turns' last workflow tasks
            wall = time.monotonic() - began
            used = {p: cpu_seconds(pid) - before[p] for p, pid in pids.items()}
            if i == 0:
                continue
            idle_now = [p for p in pids if p != system and (p != "server" or system == "floor")]
            for p in idle_now:
                idle[p].append(used[p] / wall)
            samples[system].append(
                {
                    "tokens": tokens,
                    "wall_s": wall,
                    "cpu_s": used[system],
                    "server_s": used["server"],
                }
            )
    return {"samples": samples, "idle_rate": {p: median(v) for p, v in idle.items()}}


def per_token(cpu: dict[str, Any], system: str, process: str) -> list[float]:
    """Per round, (CPU − idle rate × wall) ÷ tokens of ``process`` while ``system``
    streamed (µs), in round order: round i of every system ran back to back."""
    rate = cpu["idle_rate"][process]
    key = "server_s" if process == "server" else "cpu_s"
    return [
        (s[key] - rate * s["wall_s"]) / max(s["tokens"], 1) * 1e6 for s in cpu["samples"][system]
    ]


# --- the run ------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any], dict[str, Any]]:
    from temporalio.client import Client

    from durable_turns.client import TurnsClient
    from durable_turns.codec import data_converter_from_env

    tmp = Path(tempfile.mkdtemp(prefix="bench-cost-", dir=args.tmp))
    load_start = loadavg()
    mock = ReplayServer(tmp)
    metrics_port = free_port()
    workers: list[WorkerProcess] = []
    floor: Floor | None = None
    raw: dict[str, Any] = {"rules": actions.RULES}
    try:
        async with temporal_server(tmp, metrics_port=metrics_port) as (address, server):
            client = await Client.connect(address, data_converter=data_converter_from_env())
            ctx = Ctx(address, server["pid"], metrics_port, tmp, mock, client)
            base_env = {
                "ANTHROPIC_BASE_URL": mock.base_url,
                "ANTHROPIC_API_KEY": "bench-key",
                "TURNS_MODEL": f"anthropic:{MODEL}",
                "TURNS_TOOLS": "bench.pace_tools",
            }
            if args.loop_coalesce_ms is not None:  # else the worker's default
                base_env["TURNS_LOOP_COALESCE_MS"] = str(args.loop_coalesce_ms)
            variants = {
                "default hooks": {},
                "user on_chunk": {"TURNS_HOOKS": "bench.cost_hooks:CountChunks"},
                "no cancel marks": {"TURNS_CHUNK_STREAM_URL": "none"},
            }
            if args.only not in (None, "heartbeats"):
                del variants["no cancel marks"]
            for name, extra in variants.items():
                tag = uuid.uuid4().hex[:6]
                queue = f"cost-{tag}"
                stream = extra.get(
                    "TURNS_CHUNK_STREAM_URL", f"sqlite:///{tmp / f'chunks-{tag}.db'}"
                )
                env = {**base_env, "TURNS_CHUNK_STREAM_URL": stream, **extra}
                worker = await asyncio.to_thread(start_engine_worker, address, queue, tmp, **env)
                workers.append(worker)
                turns = TurnsClient(client, queue, stream_url=None if stream == "none" else stream)
                engine = Engine(name, worker, turns, [f"cost-{tag}-{n}" for n in range(args.turns)])
                if stream == "none":
                    ctx.no_marks = engine
                else:
                    ctx.engines[name] = engine
            mock.script(paced(args.tokens))
            for engine in ctx.engines.values():  # every conversation exists and is cached
                await engine_round(engine.turns, engine.conversations)
            if args.only == "actions":  # the server's action counter catches up with the warm-up
                await asyncio.sleep(5.0)
            if args.only in (None, "cpu"):
                floor = await asyncio.to_thread(Floor, mock.base_url, tmp)
                print("[cpu] per token …", flush=True)
                raw["cpu"] = await cpu_phase(ctx, floor, args.rounds, args.turns)
            if args.only in (None, "heartbeats"):
                print("[heartbeats] a long step …", flush=True)
                raw["heartbeats"] = await measure_heartbeats(ctx, args.long_step_s)
            if args.only in (None, "actions"):
                print("[actions] 1-step and 3-step paced turns …", flush=True)
                raw["actions"] = await measure_actions(ctx, args.action_turns)
            if args.only in (None, "actions") and not args.no_peers:
                print("[actions] the peers …", flush=True)
                raw["peer_actions"] = await peer_actions(ctx, args.action_turns)
            for closing in [*ctx.engines.values(), ctx.no_marks]:
                if closing is not None:
                    await closing.turns.aclose()
    finally:
        if floor is not None:
            floor.stop()
        for worker in workers:
            worker.stop()
        mock.stop()
    rows = cpu_rows(raw["cpu"], per_token, TARGETS, args) if "cpu" in raw else []
    if "heartbeats" in raw:
        rows += heartbeat_rows(raw["heartbeats"], args.long_step_s)
    if "actions" in raw:
        rows += action_rows(raw["actions"], raw.get("peer_actions"), args.no_peers)
    meta = run_meta(
        f"{args.turns} concurrent turns × {args.tokens} tokens at {TOKENS_PER_S:g} tokens/s,"
        f" {args.rounds} rotating rounds after a warm-up"
        + (f"; only the {args.only} part (a partial run)" if args.only else "")
        + (
            f"; the workers' TURNS_LOOP_COALESCE_MS={args.loop_coalesce_ms}"
            if args.loop_coalesce_ms is not None
            else ""
        ),
        args.command,
        load_start,
        server,
    )
    return rows, raw, meta


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["floor"]:
        floor_main(argv[1])
        return
    p = argparse.ArgumentParser(prog="python -m bench.cost", description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=1000, help="tokens per turn (one step)")
    p.add_argument("--turns", type=int, default=6, help="concurrent turns per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--long-step-s", type=float, default=20.0)
    p.add_argument(
        "--action-turns",
        type=int,
        default=5,
        help="turns of each kind counted (a peer's count varies from turn to turn: its median)",
    )
    p.add_argument("--no-peers", action="store_true", help="no peer action counts")
    p.add_argument(
        "--loop-coalesce-ms",
        type=int,
        help="the workers' TURNS_LOOP_COALESCE_MS (0: off; unset: the default)",
    )
    p.add_argument(
        "--only", choices=["cpu", "heartbeats", "actions"], help="measure this part alone"
    )
    p.add_argument("--tmp", default="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    p.add_argument("--out", default="cost", help="results stem (bench/results/STEM.md)")
    args = p.parse_args(argv)
    args.command = " ".join(["python -m bench.cost", *argv])
    started = time.monotonic()
    rows, raw, meta = asyncio.run(run(args))
    meta["seconds"] = round(time.monotonic() - started)
    meta["tables"] = [actions_table(raw)] if "actions" in raw else []
    print(render_text(rows))
    for table in meta["tables"]:
        print("\n" + table)
    print(f"written: {write_results(meta, rows, raw, args.out)}")
    sys.stdout.flush()
    os._exit(0)  # temporalio on 3.11 can crash at interpreter exit


def actions_table(raw: dict[str, Any]) -> str:
    """The counting rules, and each measured turn's actions by kind."""
    lines = ["| kind of action | the rule used |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in actions.RULES.items()]
    lines += [
        "",
        "| turn | actions by kind (median turn) | server's `action` metric |",
        "|---|---|---|",
    ]
    for label, found in [*raw["actions"].items(), *(raw.get("peer_actions") or {}).items()]:
        if "error" in found:
            lines.append(f"| {label} | not measured: {found['error']} | |")
            continue
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(found["median_kinds"].items()))
        metric = ", ".join(f"{k} {v:g}" for k, v in sorted(found["median_metric"].items()))
        lines.append(f"| {label} | {kinds} | {metric or '—'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
