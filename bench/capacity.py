"""How many streaming turns one worker core holds: the concurrent turns one engine worker
process, pinned to one core, sustains at 60 tokens a second with an added inter-token
latency p99 ≤ 100 ms, beside what the direct SDK loop sustains on the same core in the
same run.

    python -m bench.capacity [--levels 10,20,40,80,160,320] [--tokens 600] [--rounds 3]
                             [--refine 2] [--core 0] [--chunks sqlite|redis]

The model is the replay server (``testkit/llm_server.py``, a process of its own) at a real
model's pace: the first token 400 ms after the request, then 60 tokens a second, each token
one Anthropic text delta (``w0 w1 …``: the index tells the reader which token it got).
Two systems, each a process of its own pinned to ``--core`` (``taskset``, else
``os.sched_setaffinity`` before ``exec``), run one after the other; everything else (this
process, the dev server, the replay server) is pinned to the other cores:

* **the direct SDK loop** (the floor): N concurrent ``AsyncAnthropic.messages.create(
  stream=True)`` streams iterated to their end, timing each text delta as it arrives
  (``python -m bench.capacity floor``);
* **durable-turns**: ``python worker.py`` at the defaults (SQLite store and chunk stream,
  default hooks; ``--chunks redis``: the chunk stream in a ``redis-server`` of the run's
  own, on the other cores); this process starts N turns, each on a conversation of its own
  (``TurnsClient.start``), and reads each turn's chunk stream to its ``turn-finish``,
  timing each token as the reader gets it.

The N turns (streams) of a round start at random times within their first second, as chats
do, not all in the same millisecond. **Added inter-token latency**: per token after a
turn's first, the gap since the token before it as its reader got it, minus the mock's gap
(1/60 s); tokens that come in one chunk have a gap of 0. A level is **sustained** when the
median over ``--rounds`` rounds of the per-round p99 is ≤ 100 ms (a level that is not gets
as many rounds again, and the median is over all of them: a shared machine's spike does not
end the search), the turns keep pace (the p99 of how late a token is against the turn's
first token plus k/60 s is ≤ 1 s), the turns stream together (at some moment at least 90 %
of them were between their first and last token: turns the server or the worker started one
after another do not count as concurrent) and every turn completed. Each level also reports
the p99 of a turn's wait for its first token past the mock's 400 ms, from its request.
Levels double until one is not sustained, then ``--refine`` bisection steps between the last
sustained level and the first that is not. The capacity is the highest sustained level; the
ratio is durable-turns' over the floor's (issue 36: ≥ 0.5×).

Last, one observation: a worker with ``TURNS_MAX_CONCURRENT_ACTIVITIES=2`` gets three turns
at once; what ``turns state`` (``TurnsClient.state``) says of the third while it waits for
a slot. Writes ``bench/results/capacity.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import (
    ROOT,
    ReplayServer,
    Row,
    WorkerProcess,
    activity_spans,
    cpu_seconds,
    engine_env,
    loadavg,
    median,
    percentile,
    ready_worker,
    run_and_write,
    run_meta,
    temporal_server,
)
from bench.cost import Floor, sdk_text_deltas
from bench.cost_run import FIRST_TOKEN_S, paced
from bench.scale import TOKEN, Redis, turn_arrivals

MODEL = "claude-sonnet-4-5"
TOKENS_PER_S = 60.0
BOUND_S = 0.100
"""Issue 36: added inter-token latency p99 ≤ 100 ms."""
PACE_BOUND_S = 1.0
"""A level whose tokens fall behind the mock's pace by more than this (p99) is not sustained."""
TOGETHER = 0.9
"""A level is sustained only if at some moment this share of its turns streamed at once."""
TARGET = 0.5
"""Issue 36: durable-turns sustains ≥ 0.5× the direct SDK loop's turns."""
SPREAD_S = 1.0
"""The turns of a round start at random times within this long."""
FLOOR_READY = "capacity floor ready"


def pinned(core: int, argv: list[str]) -> list[str]:
    """``argv`` run on ``core`` only (its threads too: the affinity is set before exec)."""
    if shutil.which("taskset"):
        return ["taskset", "-c", str(core), *argv]
    return [sys.executable, "-m", "bench.capacity", "pin", str(core), *argv]


def added_latency(arrivals: list[tuple[int, float]]) -> tuple[list[float], list[float]]:
    """(gaps, lateness) of one turn's tokens after its first: the gap since the token
    before it minus 1/60 s, and its arrival minus (the first token's + k/60 s)."""
    got = sorted(arrivals)
    if not got:
        return [], []
    first = got[0][1]
    gaps = [t - prev - (k - pk) / TOKENS_PER_S for (pk, prev), (k, t) in itertools.pairwise(got)]
    late = [t - first - (k - got[0][0]) / TOKENS_PER_S for k, t in got[1:]]
    return gaps, late


Turn = tuple[float, list[tuple[int, float]]]
"""One turn of a round: when it was requested and its tokens' (index, arrival) pairs
(``time.perf_counter``, of the process that read it)."""


def summary(turns: list[Turn], tokens: int, completed: int) -> dict[str, Any]:
    """One round's figures from every turn's request time and (token index, arrival) pairs."""
    gaps: list[float] = []
    late: list[float] = []
    waits: list[float] = []
    spans: list[tuple[float, float]] = []
    for sent, arrivals in turns:
        g, lt = added_latency(arrivals)
        gaps += g
        late += lt
        if arrivals:
            first, last = min(t for _, t in arrivals), max(t for _, t in arrivals)
            waits.append(first - sent - FIRST_TOKEN_S)
            spans.append((first, last))
    return {
        "turns": len(turns),
        "completed": completed,
        "tokens": sum(len(a) for a in turns),
        "tokens_expected": tokens * len(turns),
        "gap_p50_ms": round(percentile(gaps, 50) * 1000, 1),
        "gap_p99_ms": round(percentile(gaps, 99) * 1000, 1),
        "late_p99_ms": round(percentile(late, 99) * 1000, 1),
        "wait_p99_ms": round(percentile(waits, 99) * 1000, 1) if waits else float("inf"),
        "together": round(most_at_once(spans) / max(len(turns), 1), 3),
    }


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of ``spans`` (first, last token) open at one moment."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: e[0])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


# --- the floor: the direct SDK loop in a process of its own -------------------------------------


def floor_main(base_url: str) -> None:
    """``python -m bench.capacity floor BASE_URL``: per line ``N TOKENS`` on stdin, N
    concurrent raw streams of the mock's reply; answers one line of JSON (``summary``)."""
    import anthropic

    async def one(sdk: Any, delay: float) -> Turn:
        await asyncio.sleep(delay)
        sent = time.perf_counter()
        arrivals: list[tuple[int, float]] = []
        async for text in sdk_text_deltas(sdk):
            now = time.perf_counter()
            arrivals += [(int(k), now) for k in TOKEN.findall(text)]
        return sent, arrivals

    with asyncio.Runner() as runner:
        sdk = anthropic.AsyncAnthropic(base_url=base_url, api_key="bench-key", max_retries=0)
        print(FLOOR_READY, flush=True)
        for line in sys.stdin:
            n, tokens = (int(x) for x in line.split())

            async def streams(n: int = n) -> list[Any]:
                delays = [random.uniform(0, SPREAD_S) for _ in range(n)]
                return await asyncio.gather(*(one(sdk, d) for d in delays), return_exceptions=True)

            done = runner.run(streams())
            ok = [a for a in done if isinstance(a, tuple)]
            print(json.dumps(summary(ok, tokens, len(ok))), flush=True)


class PinnedFloor(Floor):
    """``bench.cost.Floor``'s process, this module's floor, on one core."""

    def __init__(self, base_url: str, tmp: Path, core: int) -> None:
        argv = [sys.executable, "-m", "bench.capacity", "floor", base_url]
        super().__init__(base_url, tmp, argv=pinned(core, argv), ready=FLOOR_READY)

    def round(self, n: int, tokens: int) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{n} {tokens}\n")
        self.proc.stdin.flush()
        return dict(json.loads(self.proc.stdout.readline()))


# --- durable-turns --------------------------------------------------------------------------------


async def engine_round(turns: Any, n: int, tokens: int, pool: str) -> dict[str, Any]:
    """A next turn on each of N conversations (``pool``-0 … ``pool``-(N−1): warm after the
    first round that used them), started within ``SPREAD_S``; each read to its end."""

    async def one(conversation: str) -> tuple[Turn, bool]:
        await asyncio.sleep(random.uniform(0, SPREAD_S))
        sent = time.perf_counter()
        started = await turns.start(conversation, "Tell me a story.")
        arrivals = await turn_arrivals(turns, conversation, started)
        result = await turns.result(conversation, started)
        return (sent, arrivals), result.status == "completed"

    limit = tokens / TOKENS_PER_S + 120
    done = await asyncio.wait_for(
        asyncio.gather(*(one(f"{pool}-{i}") for i in range(n)), return_exceptions=True), limit
    )
    ok = [d for d in done if isinstance(d, tuple)]
    return summary([a for a, _ in ok], tokens, sum(1 for _, c in ok if c))


def start_pinned_worker(
    address: str, queue: str, tmp: Path, core: int, env: dict[str, str]
) -> WorkerProcess:
    worker = WorkerProcess(
        pinned(core, [sys.executable, str(ROOT / "worker.py")]),
        engine_env(address, queue, tmp, **env),
        tmp / f"worker-{queue}.log",
        "worker ready",
    )
    return ready_worker(worker)


# --- stepping the level ---------------------------------------------------------------------------


def sustained(rounds: list[dict[str, Any]]) -> bool:
    return (
        median(r["gap_p99_ms"] for r in rounds) <= BOUND_S * 1000
        and median(r["late_p99_ms"] for r in rounds) <= PACE_BOUND_S * 1000
        and median(r["together"] for r in rounds) >= TOGETHER
        and all(r["completed"] == r["turns"] for r in rounds)
    )


class Search:
    """One system's levels: doubling until one fails, then bisection."""

    def __init__(self, levels: list[int], refine: int) -> None:
        self.todo = list(levels)
        self.refine = refine
        self.results: dict[int, dict[str, Any]] = {}
        self.best = 0
        self.failed: int | None = None

    def next(self) -> int | None:
        if self.failed is None:
            return self.todo.pop(0) if self.todo else None
        if self.refine <= 0:
            return None
        mid = (self.best + self.failed) // 2
        return None if mid <= self.best or mid >= self.failed else mid

    def record(self, n: int, rounds: list[dict[str, Any]]) -> None:
        ok = sustained(rounds)
        self.results[n] = {
            "sustained": ok,
            "gap_p99_ms": median(r["gap_p99_ms"] for r in rounds),
            "gap_p50_ms": median(r["gap_p50_ms"] for r in rounds),
            "late_p99_ms": median(r["late_p99_ms"] for r in rounds),
            "wait_p99_ms": median(r["wait_p99_ms"] for r in rounds),
            "together": median(r["together"] for r in rounds),
            **{
                k: median(r.get(k, 0) for r in rounds)
                for k in ("cpu_share", "mock_cpu", "server_cpu", "bench_cpu")
            },
            "rounds": rounds,
        }
        if self.failed is not None:
            self.refine -= 1
        if ok:
            self.best = max(self.best, n)
        else:
            self.failed = n if self.failed is None else min(self.failed, n)


async def measured(pid: int, run: Any, others: dict[str, int]) -> dict[str, Any]:
    """``run()``'s summary plus the share of a core the pinned process used meanwhile
    (``cpu_share``), and each of ``others`` (the mock, the dev server, this process)."""
    pids = {"cpu_share": pid} | others
    before, began = {k: cpu_seconds(p) for k, p in pids.items()}, time.monotonic()
    got: dict[str, Any] = await run()
    wall = time.monotonic() - began
    got |= {k: round((cpu_seconds(p) - before[k]) / wall, 2) for k, p in pids.items()}
    return got


async def wait_observation(
    address: str, client: Any, tmp: Path, core: int, mock_url: str
) -> dict[str, Any]:
    """Three turns on a worker with two activity slots: ``state`` of the third meanwhile."""
    from durable_turns.client import TurnsClient
    from durable_turns.contract import MODEL_STEP
    from durable_turns.errors import DurableTurnsError

    queue = f"cap-slots-{uuid.uuid4().hex[:6]}"
    stream = f"sqlite:///{tmp / f'chunks-{queue}.db'}"
    env = {
        **engine_base_env(mock_url),
        "TURNS_CHUNK_STREAM_URL": stream,
        "TURNS_MAX_CONCURRENT_ACTIVITIES": "2",
    }
    worker = await asyncio.to_thread(start_pinned_worker, address, queue, tmp, core, env)
    turns = TurnsClient(client, queue, stream_url=stream)
    try:
        convs = [f"{queue}-{i}" for i in range(3)]
        started = []
        for c in convs:
            started.append(await turns.start(c, "Tell me a story."))
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.5)
        seen: dict[str, Any] = {}
        try:
            state = await turns.state(convs[2])
            running = state.running
            seen["state"] = {
                "running": running.model_dump(exclude_none=True) if running else None,
                "queued_count": state.queued_count,
                "waiting_for": state.waiting_for,
            }
        except DurableTurnsError as e:
            seen["state"] = f"{type(e).__name__}: {e}"
        seen["waiting_for_worker"] = await turns.waiting_for_worker(
            convs[2], started[2].turn_number
        )
        first = await turns.state(convs[0])
        seen["state_of_a_streaming_turn"] = (
            first.running.model_dump(exclude_none=True) if first.running else None
        )
        for c, s in zip(convs, started, strict=True):
            await turns.result(c, s)
        history = await client.get_workflow_handle(started[2].workflow_id).fetch_history()
        spans = activity_spans(history, MODEL_STEP)
        seen["model_step_waited_s"] = [
            round((sp["started"] - sp["scheduled"]).total_seconds(), 2)
            for sp in spans
            if "started" in sp
        ]
        return seen
    finally:
        await turns.aclose()
        await asyncio.to_thread(worker.stop)


def engine_base_env(mock_url: str) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": mock_url,
        "ANTHROPIC_API_KEY": "bench-key",
        "TURNS_MODEL": f"anthropic:{MODEL}",
    }


def leave_core(core: int, prefix: str, tmp_root: str | None) -> tuple[list[int], set[int], Path]:
    """The start of a run pinning a system to ``core`` (inside its running task): SIGTERM
    unwinds it like Ctrl-C (the processes it started are stopped), and this process, with the
    dev server and the mock it starts, moves to the other cores. Returns every core (read
    before the move), the others, and a new temporary folder under ``tmp_root``."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    cores = sorted(os.sched_getaffinity(0))
    others = set(cores) - {core} or set(cores)
    os.sched_setaffinity(0, others)
    return cores, others, Path(tempfile.mkdtemp(prefix=prefix, dir=tmp_root))


# --- the run ------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any], dict[str, Any]]:
    from temporalio.client import Client

    from durable_turns.client import TurnsClient
    from durable_turns.codec import data_converter_from_env

    cores, others, tmp = leave_core(args.core, "bench-capacity-", args.tmp)
    load_start = loadavg()
    mock = ReplayServer(tmp)
    floor: PinnedFloor | None = None
    worker: WorkerProcess | None = None
    redis: Redis | None = None
    raw: dict[str, Any] = {
        "chunks": args.chunks,
        "core": args.core,
        "others": sorted(others),
        "loadavg": [load_start],
    }
    try:
        async with temporal_server(tmp) as (address, server):
            client = await Client.connect(address, data_converter=data_converter_from_env())
            queue = f"cap-{uuid.uuid4().hex[:6]}"
            stream = f"sqlite:///{tmp / f'chunks-{queue}.db'}"
            if args.chunks == "redis":
                redis = Redis(tmp)  # on the other cores, like the dev server
                stream = f"{redis.url}?prefix={queue}:"
            env = {**engine_base_env(mock.base_url), "TURNS_CHUNK_STREAM_URL": stream}
            worker = await asyncio.to_thread(
                start_pinned_worker, address, queue, tmp, args.core, env
            )
            turns = TurnsClient(client, queue, stream_url=stream)
            mock.script(paced(args.tokens))
            floor = await asyncio.to_thread(PinnedFloor, mock.base_url, tmp, args.core)
            print("[warm-up] …", flush=True)
            pool = f"cap-{uuid.uuid4().hex[:6]}"
            await engine_round(turns, args.levels[0], 60, pool)
            await asyncio.to_thread(floor.round, args.levels[0], 60)
            cast = {
                "mock_cpu": mock.proc.pid,
                "server_cpu": server["pid"],
                "bench_cpu": os.getpid(),
            }
            searches = {
                "floor": Search(args.levels, args.refine),
                "engine": Search(args.levels, args.refine),
            }
            fl, wk = floor, worker
            runs = {
                "floor": lambda n: measured(
                    fl.pid, lambda: asyncio.to_thread(fl.round, n, args.tokens), cast
                ),
                "engine": lambda n: measured(
                    wk.pid, lambda: engine_round(turns, n, args.tokens, pool), cast
                ),
            }
            while True:
                step = {name: s.next() for name, s in searches.items()}
                if all(n is None for n in step.values()):
                    break
                for name, n in step.items():
                    if n is None:
                        continue
                    rounds: list[dict[str, Any]] = []
                    for _ in range(args.rounds * 2):  # a level that fails gets as many again
                        try:
                            rounds.append(await runs[name](n))
                        except Exception as e:  # a round that never ends: not sustained
                            rounds.append(failed_round(n, e))
                        if len(rounds) == args.rounds and sustained(rounds):
                            break
                    searches[name].record(n, rounds)
                    r = searches[name].results[n]
                    print(
                        f"[{name}] {n} turns: gap p99 {r['gap_p99_ms']} ms, late p99"
                        f" {r['late_p99_ms']} ms, first-token wait p99 {r['wait_p99_ms']} ms,"
                        f" at once {r['together']:.0%},"
                        f" core {r['cpu_share']:.0%}, mock"
                        f" {r['mock_cpu']:.0%}, server {r['server_cpu']:.0%}, reader"
                        f" {r['bench_cpu']:.0%}, "
                        + ("sustained" if r["sustained"] else "NOT sustained")
                        + f" (load {loadavg()})",
                        flush=True,
                    )
                    raw["loadavg"].append(loadavg())
            raw["search"] = {
                name: {"capacity": s.best, "first_failed": s.failed, "levels": s.results}
                for name, s in searches.items()
            }
            await turns.aclose()
            await asyncio.to_thread(worker.stop)
            worker = None
            print("[observation] a turn waiting for an activity slot …", flush=True)
            try:
                raw["waiting"] = await wait_observation(
                    address, client, tmp, args.core, mock.base_url
                )
            except Exception as e:
                raw["waiting"] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        if floor is not None:
            floor.stop()
        if worker is not None:
            worker.stop()
        if redis is not None:
            redis.stop()
        mock.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    meta = run_meta(
        f"turns at {TOKENS_PER_S:g} tokens/s × {args.tokens} tokens, levels"
        f" {','.join(map(str, args.levels))} (+{args.refine} bisections), {args.rounds} rounds"
        f" each, the worker and the floor pinned to core {args.core}; chunk stream"
        f" {args.chunks}",
        args.command,
        load_start,
        server,
    )
    meta["machine"]["nproc"] = len(cores)  # read before this process was pinned
    meta["machine"]["pinned"] = f"core {args.core}: the worker, the floor; the rest: {others}"
    return rows_of(raw), raw, meta


def failed_round(n: int, e: BaseException) -> dict[str, Any]:
    return {
        "turns": n,
        "completed": 0,
        "gap_p99_ms": float("inf"),
        "gap_p50_ms": float("inf"),
        "late_p99_ms": float("inf"),
        "wait_p99_ms": float("inf"),
        "together": 0.0,
        "error": f"{type(e).__name__}: {e}",
    }


def rows_of(raw: dict[str, Any]) -> list[Row]:
    found = raw["search"]
    floor, engine = found["floor"]["capacity"], found["engine"]["capacity"]
    ratio = engine / floor if floor else 0.0

    def at(name: str) -> str:
        best = found[name]["capacity"]
        if not best:
            return "no level sustained"
        r = found[name]["levels"][best]
        nxt = found[name]["first_failed"]
        beyond = (
            f"; {nxt} turns: gap p99 {found[name]['levels'][nxt]['gap_p99_ms']:g} ms"
            if nxt
            else "; no level failed (raise --levels)"
        )
        return (
            f"at {best} turns: gap p50 {r['gap_p50_ms']:g} ms, p99 {r['gap_p99_ms']:g} ms,"
            f" late p99 {r['late_p99_ms']:g} ms, first-token wait p99 {r['wait_p99_ms']:g} ms,"
            f" {r['together']:.0%} at once, its core {r['cpu_share']:.0%} busy{beyond}"
        )

    rows = [
        Row(
            "capacity",
            "direct SDK loop: concurrent streams one core sustains",
            f"{floor}",
            "the floor",
            note=at("floor"),
        ),
        Row(
            "capacity",
            "durable-turns: concurrent streaming turns one worker core sustains",
            f"{engine}",
            f"direct SDK loop {floor}",
            ratio=ratio,
            target=f"≥ {TARGET:g}×",
            status="met" if ratio >= TARGET else "MISSED",
            note=at("engine"),
        ),
    ]
    waiting = raw.get("waiting", {})
    rows.append(
        Row(
            "queue",
            "a turn past the worker's activity slots (TURNS_MAX_CONCURRENT_ACTIVITIES=2, 3 turns)",
            "observed",
            note=f"`state` of the waiting turn: {json.dumps(waiting.get('state', waiting))};"
            f" waiting_for_worker: {waiting.get('waiting_for_worker')!r}; its model step waited"
            f" {waiting.get('model_step_waited_s')} s for a slot",
        )
    )
    return rows


def levels_table(raw: dict[str, Any]) -> str:
    lines = [
        "| system | turns | added gap p50 | added gap p99 | late p99 | first-token wait p99"
        " | most at once | its core busy | mock · server · reader CPU | sustained |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, label in (("floor", "direct SDK loop"), ("engine", "durable-turns")):
        for n, r in sorted(raw["search"][name]["levels"].items()):
            lines.append(
                f"| {label} | {n} | {r['gap_p50_ms']:g} ms | {r['gap_p99_ms']:g} ms"
                f" | {r['late_p99_ms']:g} ms | {r['wait_p99_ms']:g} ms | {r['together']:.0%}"
                f" | {r['cpu_share']:.0%}"
                f" | {r['mock_cpu']:.0%} · {r['server_cpu']:.0%} · {r['bench_cpu']:.0%}"
                f" | {'yes' if r['sustained'] else 'no'} |"
            )
    return "\n".join(lines)


def layout_arguments(p: argparse.ArgumentParser, out: str) -> None:
    """The options of a run pinning its systems to one core: ``--core``, ``--tmp``, ``--out``."""
    p.add_argument("--core", type=int, default=0, help="the core the pinned systems run on")
    p.add_argument("--tmp", default="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    p.add_argument("--out", default=out, help="results stem (bench/results/STEM.md)")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["floor"]:
        floor_main(argv[1])
        return
    if argv[:1] == ["pin"]:  # no taskset: pin, then become the command
        os.sched_setaffinity(0, {int(argv[1])})
        os.execv(argv[2], argv[2:])
    p = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__.split("\n")[0])
    p.add_argument("--levels", default="10,20,40,80,160,320", help="turns per level, rising")
    p.add_argument("--tokens", type=int, default=600, help="tokens per turn (one step)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per level (medians)")
    p.add_argument("--refine", type=int, default=2, help="bisection steps past the doubling")
    p.add_argument(
        "--chunks",
        choices=["sqlite", "redis"],
        default="sqlite",
        help="the engine's chunk stream (redis: a redis-server of the run's own)",
    )
    layout_arguments(p, "capacity")
    args = p.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",")]
    args.command = " ".join(["python -m bench.capacity", *argv])
    run_and_write(lambda: run(args), lambda raw: [levels_table(raw)], args.out)


if __name__ == "__main__":
    main()
