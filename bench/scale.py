"""Cost as the work grows: 10, 100 and 1,000 concurrent streaming turns on one worker
process, then on two, for each store.

    python -m bench.scale [--levels 10,100,1000] [--stores sqlite,postgres-redis]
                          [--workers 1,2] [--tokens 100] [--quick]

The model is the local replay server (``testkit/llm_server.py``, a process of its own) at a
realistic pace: the first token 400 ms after the request, then 60 tokens a second, each
token one Anthropic text delta (``first_token_s``/``tokens_per_s`` of its ``Reply``). Each
turn is the first of its own conversation; the client starts all N at once
(``TurnsClient.start``), follows each turn's chunk stream to its ``turn-finish`` and
awaits its result. The workers are real ``python worker.py`` processes on one task queue
of a fresh embedded dev server; every run has fresh workers (warmed up by a few turns
first) and a fresh store. Per run:

* **RSS per in-flight turn**: the peak of the workers' summed ``VmRSS`` (sampled every
  100 ms) minus its value when idle after the warm-up, ÷ N;
* **CPU per streamed token**: the workers' user + system CPU (``/proc``) during the run ÷
  the tokens streamed; the dev server's beside it;
* **store writes per token**: rows written (SQLite: counted by triggers the benchmark adds
  to every table of the transcript and chunk files; PostgreSQL: ``tup_inserted +
  tup_updated + tup_deleted`` of a database of the run's own in ``pg_stat_database``) and
  Redis write commands (``INFO commandstats`` of a ``redis-server`` of the benchmark's own,
  everything but reads), ÷ tokens;
* **added inter-token latency**: for token k of a turn, when the client got it, minus when
  it got the turn's first token, minus k ÷ 60 s (the mock's own pace): p50 and p99 over
  every token of every turn. The time to the first token is ``bench.ttft``'s;
* **turns/s per core**: N ÷ the run's wall time ÷ the machine's cores, and turns per CPU
  second of the workers;
* **stalls and heartbeat timeouts**: ``recovering`` and ``reset`` events on the streams,
  any activity attempt after the first in the turns' histories, and the workers' logs. The
  stall watchdog is on at ``TURNS_STALL_TIMEOUT_MS=10000``, the heartbeat timeout at its
  default (30 s).

Per-unit costs at 100 and 1,000 turns are divided by those at 10 (the growth table): a
ratio well above 1 means the total grows faster than linearly. Writes
``bench/results/scale.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    ReplayServer,
    Row,
    WorkerProcess,
    cpu_seconds,
    free_port,
    loadavg,
    percentile,
    proc_status,
    render_text,
    run_meta,
    start_engine_worker,
    temporal_server,
    write_results,
)

MODEL = "claude-sonnet-4-5"  # any name: the local server answers every one
FIRST_TOKEN_S = 0.4
TOKENS_PER_S = 60.0
STALL_TIMEOUT_MS = 10_000
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_STATS_IDLE_S = 11.0
"""PostgreSQL 15 flushes an idle backend's statistics within 10 s (PGSTAT_IDLE_INTERVAL):
the warm-up's writes are in ``pg_stat_database`` after this long."""
ACTIVITY_SLOTS = 200
"""``max_concurrent_activities`` of an engine worker (``runtime.running_worker``)."""
REDIS_READS = {
    "xread", "xrange", "xrevrange", "xlen", "xinfo", "get", "mget", "hget", "hgetall",
    "hmget", "exists", "ttl", "pttl", "type", "scan", "keys", "ping", "info", "config",
    "client", "hello", "command", "select", "script", "echo",
}  # fmt: skip
STORES = {
    "sqlite": ("SQLite", "SQLite"),
    "postgres-redis": ("PostgreSQL", "Redis"),
    "postgres-sqlite": ("PostgreSQL", "SQLite"),
    "sqlite-redis": ("SQLite", "Redis"),
}
"""``--stores`` names: (transcript store, chunk stream)."""
TOKEN = re.compile(r"w(\d+) ")


def sse_body(tokens: int) -> str:
    """An Anthropic stream of ``tokens`` text deltas, ``w0 w1 …`` (the index tells the
    client which token it got)."""

    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"

    message = {
        "id": "msg_scale",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 1},
    }
    out = [
        event("message_start", {"type": "message_start", "message": message}),
        event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    for k in range(tokens):
        delta = {"type": "text_delta", "text": f"w{k} "}
        out.append(
            event(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        )
    out += [
        event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": tokens},
            },
        ),
        event("message_stop", {"type": "message_stop"}),
    ]
    return "".join(out)


# --- the services of one benchmark -------------------------------------------------------------


class Mock(ReplayServer):
    """The replay server answering every request with the paced stream."""

    def __init__(self, tmp: Path, tokens: int) -> None:
        super().__init__(tmp)
        reply = {
            "body": sse_body(tokens),
            "times": 10**9,
            "first_token_s": FIRST_TOKEN_S,
            "tokens_per_s": TOKENS_PER_S,
        }
        self.post("script", reply)


class Redis:
    """A ``redis-server`` of the benchmark's own (no persistence), so its command counts
    are this benchmark's alone."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(tmp)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 15
        while self.cli("ping").strip() != "PONG":
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.1)

    def cli(self, *args: str) -> str:
        run = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True
        )
        return run.stdout

    def reset(self) -> None:
        self.cli("config", "resetstat")

    def writes(self) -> dict[str, int]:
        """Calls per write command since the last reset."""
        counts: dict[str, int] = {}
        for line in self.cli("info", "commandstats").splitlines():
            if line.startswith("cmdstat_"):
                name, stats = line[len("cmdstat_") :].split(":", 1)
                calls = int(dict(kv.split("=") for kv in stats.split(","))["calls"])
                if name.split("|")[0] not in REDIS_READS:
                    counts[name] = calls
        return counts

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def psql(url: str, sql: str) -> str:
    run = subprocess.run(
        ["psql", url, "-At", "-c", sql], capture_output=True, text=True, check=True
    )
    return run.stdout.strip()


def pg_row_writes(db: str) -> dict[str, int]:
    out = psql(
        PG_ADMIN,
        "SELECT tup_inserted, tup_updated, tup_deleted, xact_commit FROM pg_stat_database"
        f" WHERE datname = '{db}'",
    )
    ins, upd, dele, commits = (int(x) for x in out.split("|"))
    return {"rows": ins + upd + dele, "inserted": ins, "updated": upd, "deleted": dele,
            "transactions": commits}  # fmt: skip


def sqlite_counted(path: Path, backend: str) -> None:
    """Create the file's schema (as a worker would) and a trigger per table and statement
    kind that counts the rows written into ``bench_writes``."""
    from durable_turns.store.sqlite import SQLiteStore
    from durable_turns.streams.sqlite import SQLiteStreamBackend

    async def create() -> None:
        db = SQLiteStore(path) if backend == "store" else SQLiteStreamBackend(path)
        await db.open()
        await db.close()

    asyncio.run(create())
    conn = sqlite3.connect(path)
    tables = [
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not r[0].startswith("sqlite_")
    ]
    conn.execute("CREATE TABLE bench_writes (t TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    for table in tables:
        conn.execute("INSERT INTO bench_writes VALUES (?, 0)", (table,))
        for kind in ("INSERT", "UPDATE", "DELETE"):
            conn.execute(
                f"CREATE TRIGGER bench_{table}_{kind.lower()} AFTER {kind} ON {table}"
                f" BEGIN UPDATE bench_writes SET n = n + 1 WHERE t = '{table}'; END"
            )
    conn.commit()
    conn.close()


def sqlite_writes(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path, timeout=30)
    try:
        return {t: int(n) for t, n in conn.execute("SELECT t, n FROM bench_writes")}
    finally:
        conn.close()


# --- one run -----------------------------------------------------------------------------------


@dataclass
class Ctx:
    address: str
    server_pid: int | None
    tmp: Path
    mock: Mock
    redis: Redis | None
    pg_db: str | None
    tokens: int
    client: Any


class Store:
    """The store and chunk stream of one run, and their write counters."""

    def __init__(self, ctx: Ctx, name: str, tag: str) -> None:
        self.transcripts, self.chunks = STORES[name]
        self.env: dict[str, str] = {}
        self.sqlite_files: list[Path] = []
        if self.transcripts == "SQLite":
            path = ctx.tmp / f"transcripts-{tag}.db"
            sqlite_counted(path, "store")
            self.sqlite_files.append(path)
            self.env["TURNS_STORE_URL"] = f"sqlite:///{path}"
        else:
            assert ctx.pg_db
            schema = f"s_{tag}"
            self.env["TURNS_STORE_URL"] = (
                f"postgresql://postgres@127.0.0.1:5432/{ctx.pg_db}?schema={schema}"
            )
        if self.chunks == "SQLite":
            path = ctx.tmp / f"chunks-{tag}.db"
            sqlite_counted(path, "chunks")
            self.sqlite_files.append(path)
            self.stream_url = f"sqlite:///{path}"
        else:
            assert ctx.redis
            self.stream_url = f"{ctx.redis.url}?prefix=scale-{tag}:"
        self.env["TURNS_CHUNK_STREAM_URL"] = self.stream_url
        self.ctx = ctx

    def mark(self) -> None:
        if self.ctx.redis:
            self.ctx.redis.reset()

    def counts(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path in self.sqlite_files:
            out[f"sqlite {path.name.split('-')[0]}"] = sqlite_writes(path)
        if self.transcripts == "PostgreSQL":
            assert self.ctx.pg_db
            out["postgres"] = pg_row_writes(self.ctx.pg_db)
        if self.chunks == "Redis":
            assert self.ctx.redis
            out["redis"] = self.ctx.redis.writes()
        return out


def writes_between(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """Row writes (SQLite, PostgreSQL) and write commands (Redis) between two counts."""
    out: dict[str, int] = {}
    for key, counts in after.items():
        if key == "postgres":
            out["postgres rows"] = counts["rows"] - before[key]["rows"]
            out["postgres transactions (reads too)"] = (
                counts["transactions"] - before[key]["transactions"]
            )
        elif key == "redis":
            out["redis"] = sum(counts.values())  # the stats were reset at the mark
        else:
            out[key] = sum(counts.values()) - sum(before[key].values())
    return out


async def turn_arrivals(
    turns: Any, conversation: str, started: Any, seen: collections.Counter[str] | None = None
) -> list[tuple[int, float]]:
    """Follow a started turn's live stream to its ``turn-finish``: when each numbered token
    arrived; ``seen`` counts the other events by type."""
    assert started.turn_number is not None
    arrivals: list[tuple[int, float]] = []
    async for event in turns.chunks(conversation, started.turn_number):
        if event.type == "chunk" and event.data.get("type") == "text-delta":
            now = time.perf_counter()
            arrivals += [(int(k), now) for k in TOKEN.findall(event.data.get("text", ""))]
        elif event.type == "turn-finish":
            break
        elif seen is not None:
            seen[event.type] += 1
    return arrivals


async def one_turn(turns: Any, conversation: str, record: dict[str, Any]) -> None:
    """Start a turn, follow its stream to the end, await its result; record what came."""
    sent = time.perf_counter()
    started = await turns.start(conversation, f"Tell me about {conversation}.")
    seen: collections.Counter[str] = collections.Counter()
    arrivals = await turn_arrivals(turns, conversation, started, seen)
    record["recovering"] += seen["recovering"]
    record["reset"] += seen["reset"]
    result = await turns.result(conversation, started)
    record["status"] = result.status
    record["workflow_id"] = started.workflow_id
    record["arrivals"] = arrivals
    record["sent"] = sent


def lateness(arrivals: list[tuple[int, float]]) -> list[float]:
    """Per token after the first: how much later than the mock's pace it arrived."""
    if not arrivals:
        return []
    first = min(t for _, t in arrivals)
    return [t - first - k / TOKENS_PER_S for k, t in arrivals if k > 0]


async def extra_attempts(client: Any, workflow_ids: list[str]) -> int:
    """Activity attempts after the first in the turns' histories (a stall or a heartbeat
    timeout retries the activity)."""
    from temporalio.api.enums.v1 import EventType

    gate = asyncio.Semaphore(20)

    async def one(wid: str) -> int:
        async with gate:
            history = await client.get_workflow_handle(wid).fetch_history()
        return sum(
            1
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and e.activity_task_started_event_attributes.attempt > 1
        )

    return sum(await asyncio.gather(*(one(w) for w in workflow_ids)))


LOG_SIGNS = ("heartbeat", "stall", "timed out", "timeout", "Traceback")


def log_signs(workers: list[WorkerProcess]) -> dict[str, int]:
    counts = dict.fromkeys(LOG_SIGNS, 0)
    for w in workers:
        text = w.log_path.read_text(errors="replace")
        for sign in LOG_SIGNS:
            counts[sign] += text.lower().count(sign.lower())
    return counts


async def run_level(ctx: Ctx, store_name: str, workers_n: int, n: int) -> dict[str, Any]:
    from durable_turns.client import TurnsClient

    tag = uuid.uuid4().hex[:6]
    queue = f"scale-{store_name}-{workers_n}w-{n}-{tag}"
    store = await asyncio.to_thread(Store, ctx, store_name, tag)  # asyncio.run inside
    env = {
        **store.env,
        "ANTHROPIC_BASE_URL": ctx.mock.base_url,
        "ANTHROPIC_API_KEY": "bench-key",
        "TURNS_MODEL": f"anthropic:{MODEL}",
        "TURNS_STALL_TIMEOUT_MS": str(STALL_TIMEOUT_MS),
    }
    workers = [
        await asyncio.to_thread(start_engine_worker, ctx.address, queue, ctx.tmp, **env)
        for _ in range(workers_n)
    ]
    reader_url = store.stream_url
    if store.chunks == "Redis":
        # Each follower holds a connection in its blocking XREAD; redis-py's asyncio pool
        # allows 100 by default, past which reads fail with MaxConnectionsError and retry.
        reader_url += f"&max_connections={n + 100}"
    turns = TurnsClient(ctx.client, queue, stream_url=reader_url)
    pids = [w.pid for w in workers]
    try:
        warm = [{"recovering": 0, "reset": 0} for _ in range(3 * workers_n)]
        await asyncio.gather(*(one_turn(turns, f"warm-{tag}-{i}", r) for i, r in enumerate(warm)))
        if store.transcripts == "PostgreSQL":
            await asyncio.sleep(PG_STATS_IDLE_S)
        store.mark()
        before = await asyncio.to_thread(store.counts)
        idle_rss = sum(proc_status(p, "VmRSS") for p in pids)
        cpu = [cpu_seconds(p) for p in pids]
        server_cpu = cpu_seconds(ctx.server_pid) if ctx.server_pid else 0.0
        mock_cpu = cpu_seconds(ctx.mock.proc.pid)
        bench_cpu = time.process_time()
        peak = {"rss": idle_rss, "load": os.getloadavg()[0]}
        sampling = True

        async def sample() -> None:
            while sampling:
                peak["rss"] = max(peak["rss"], sum(proc_status(p, "VmRSS") for p in pids))
                peak["load"] = max(peak["load"], os.getloadavg()[0])
                await asyncio.sleep(0.1)

        sampler = asyncio.create_task(sample())
        records = [{"recovering": 0, "reset": 0, "status": "unfinished"} for _ in range(n)]
        started = time.perf_counter()
        outcomes = await asyncio.gather(
            *(one_turn(turns, f"scale-{tag}-{i}", r) for i, r in enumerate(records)),
            return_exceptions=True,
        )
        wall = time.perf_counter() - started
        sampling = False
        await sampler
        worker_cpu = sum(cpu_seconds(p) for p in pids) - sum(cpu)
        server_cpu = (cpu_seconds(ctx.server_pid) if ctx.server_pid else 0.0) - server_cpu
        mock_cpu = cpu_seconds(ctx.mock.proc.pid) - mock_cpu
        bench_cpu = time.process_time() - bench_cpu
        errors = [f"{type(o).__name__}: {o}" for o in outcomes if isinstance(o, BaseException)]
        ids = [r["workflow_id"] for r in records if "workflow_id" in r]
        retried = await extra_attempts(ctx.client, ids)
    finally:
        for w in workers:
            await asyncio.to_thread(w.stop)  # PostgreSQL backends flush their stats on exit
        await turns.aclose()
    if store.transcripts == "PostgreSQL":
        await asyncio.sleep(1.0)
    after = await asyncio.to_thread(store.counts)
    writes = writes_between(before, after)
    tokens = sum(len(r.get("arrivals", [])) for r in records)
    late = [x for r in records for x in lateness(r.get("arrivals", []))]
    spans = [
        (min(t for _, t in r["arrivals"]), max(t for _, t in r["arrivals"]))
        for r in records
        if r.get("arrivals")
    ]
    ttft = [min(t for _, t in r["arrivals"]) - r["sent"] for r in records if r.get("arrivals")]
    cores = len(os.sched_getaffinity(0))
    return {
        "store": store_name,
        "workers": workers_n,
        "turns": n,
        "completed": sum(r["status"] == "completed" for r in records),
        "errors": errors[:5],
        "tokens": tokens,
        "tokens_expected": n * ctx.tokens,
        "wall_s": wall,
        "max_streaming": max_overlap(spans),
        "rss_kib_per_turn": (peak["rss"] - idle_rss) / n,
        "idle_rss_mib": idle_rss / 1024,
        "peak_rss_mib": peak["rss"] / 1024,
        "worker_cpu_us_per_token": worker_cpu / max(tokens, 1) * 1e6,
        "server_cpu_us_per_token": server_cpu / max(tokens, 1) * 1e6,
        "mock_cpu_s": mock_cpu,
        "bench_cpu_s": bench_cpu,
        "worker_cpu_s": worker_cpu,
        "server_cpu_s": server_cpu,
        "cpu_busy": (worker_cpu + server_cpu + mock_cpu + bench_cpu) / (wall * cores),
        "writes": writes,
        "redis_commands": after.get("redis", {}),
        "writes_per_token": sum(v for k, v in writes.items() if "reads too" not in k)
        / max(tokens, 1),
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p99_s": percentile(ttft, 99),
        "itl_p50_ms": percentile(late, 50) * 1000,
        "itl_p99_ms": percentile(late, 99) * 1000,
        "turns_per_s_per_core": n / wall / cores,
        "turns_per_worker_cpu_s": n / worker_cpu if worker_cpu else float("nan"),
        "recovering": sum(r["recovering"] for r in records),
        "resets": sum(r["reset"] for r in records),
        "retried_activities": retried,
        "log": log_signs(workers),
        "peak_load1": peak["load"],
    }


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """The most turns streaming at one time (between their first and last token)."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    now = best = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


# --- the report ----------------------------------------------------------------------------------


GROWTH = (
    ("rss_kib_per_turn", "RSS per in-flight turn"),
    ("worker_cpu_us_per_token", "worker CPU per token"),
    ("writes_per_token", "store writes per token"),
    ("itl_p50_ms", "added inter-token latency p50"),
    ("itl_p99_ms", "added inter-token latency p99"),
)
SUPERLINEAR = 1.5
"""A per-unit cost this many times its value at the smallest level is flagged: its total
grows faster than linearly (well beyond this shared machine's noise)."""


def level_table(runs: list[dict[str, Any]]) -> str:
    head = (
        "| store · chunks | workers | turns | completed | tokens | wall | most streaming at once"
        " | RSS per turn | worker CPU per token | server CPU per token | writes per token"
        " | added ITL p50 · p99 | turns/s per core | turns per worker CPU-s | machine busy"
        " | stalls · heartbeat timeouts · retried activities | first token p50 · p99 |"
    )
    lines = [head, "|" + "---|" * 17]
    for r in runs:
        t, c = STORES[r["store"]]
        lines.append(
            f"| {t} · {c} | {r['workers']} | {r['turns']} | {r['completed']} | {r['tokens']}"
            f" | {r['wall_s']:.1f} s | {r['max_streaming']} | {r['rss_kib_per_turn']:.0f} KiB"
            f" | {r['worker_cpu_us_per_token']:.0f} µs | {r['server_cpu_us_per_token']:.0f} µs"
            f" | {r['writes_per_token']:.3f} | {r['itl_p50_ms']:.1f} · {r['itl_p99_ms']:.1f} ms"
            f" | {r['turns_per_s_per_core']:.2f} | {r['turns_per_worker_cpu_s']:.1f}"
            f" | {r['cpu_busy'] * 100:.0f}% | {r['recovering']} · {hb_timeouts(r)}"
            f" · {r['retried_activities']} | {r['ttft_p50_s']:.2f} · {r['ttft_p99_s']:.2f} s |"
        )
    return "\n".join(lines)


def hb_timeouts(r: dict[str, Any]) -> int:
    return int(r["log"]["heartbeat"])


def writes_table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| store · chunks | workers | turns | tokens | writes (rows; Redis: write commands) |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        t, c = STORES[r["store"]]
        per = "; ".join(
            f"{k}: {v} ({v / max(r['tokens'], 1):.3f}/token)" for k, v in r["writes"].items()
        )
        if r.get("redis_commands"):
            per += (
                " (" + ", ".join(f"{k} {v}" for k, v in sorted(r["redis_commands"].items())) + ")"
            )
        lines.append(f"| {t} · {c} | {r['workers']} | {r['turns']} | {r['tokens']} | {per} |")
    return "\n".join(lines)


def growth(runs: list[dict[str, Any]]) -> tuple[str, list[Row]]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["store"], r["workers"]), []).append(r)
    rows: list[Row] = []
    lines = [
        "| store · chunks | workers | per-unit cost | at the smallest level |"
        " ×, next level | ×, largest level | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for (store, workers), group in groups.items():
        group.sort(key=lambda r: r["turns"])
        base = group[0]
        t, c = STORES[store]
        for key, label in GROWTH:
            ratios = [r[key] / base[key] if base[key] > 0 else float("nan") for r in group[1:]]
            worst = max((x for x in ratios if x == x), default=float("nan"))
            verdict = "SUPERLINEAR" if worst > SUPERLINEAR else "linear or better"
            cells = [f"{x:.2f}× ({r['turns']})" for x, r in zip(ratios, group[1:], strict=True)]
            cells += [""] * (2 - len(cells))
            lines.append(
                f"| {t} · {c} | {workers} | {label} | {base[key]:.3g} ({base['turns']})"
                f" | {cells[0]} | {cells[1]} | {verdict} |"
            )
            rows.append(
                Row(
                    f"{store} {workers}w",
                    f"{label}, {group[-1]['turns']} vs {base['turns']} turns",
                    f"{group[-1][key]:.3g}",
                    f"{base[key]:.3g} at {base['turns']} turns",
                    ratios[-1] if ratios else None,
                    f"≤ {SUPERLINEAR}×",
                    "MISSED" if worst > SUPERLINEAR else "met",
                )
            )
        clean = all(
            r["completed"] == r["turns"]
            and r["recovering"] == 0
            and r["retried_activities"] == 0
            and hb_timeouts(r) == 0
            for r in group
        )
        rows.append(
            Row(
                f"{store} {workers}w",
                f"{group[-1]['turns']} turns: all completed, no stall, no heartbeat timeout",
                "yes" if clean else "NO",
                "",
                None,
                "yes",
                "met" if clean else "MISSED",
            )
        )
    return "\n".join(lines), rows


async def run(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any], dict[str, Any]]:
    from temporalio.client import Client

    from durable_turns.codec import data_converter_from_env

    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)  # clean up
    load_start = loadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-", dir=args.tmp))
    stores = args.stores.split(",")
    for name in stores:
        if name not in STORES:
            raise SystemExit(f"unknown store {name!r}: one of {', '.join(STORES)}")
    levels = [int(x) for x in args.levels.split(",")]
    worker_counts = [int(x) for x in args.workers.split(",")]
    needs_pg = any(STORES[s][0] == "PostgreSQL" for s in stores)
    needs_redis = any(STORES[s][1] == "Redis" for s in stores)
    pg_db = f"bench_scale_{uuid.uuid4().hex[:8]}" if needs_pg else None
    if pg_db:
        psql(PG_ADMIN, f"CREATE DATABASE {pg_db}")
    redis = Redis(tmp) if needs_redis else None
    mock = Mock(tmp, args.tokens)
    runs: list[dict[str, Any]] = []
    try:
        async with temporal_server(tmp) as (address, server):
            client = await Client.connect(address, data_converter=data_converter_from_env())
            ctx = Ctx(address, server["pid"], tmp, mock, redis, pg_db, args.tokens, client)
            for name in stores:
                for workers in worker_counts:
                    for n in levels:
                        print(f"[{name}, {workers} worker(s), {n} turns] …", flush=True)
                        r = await run_level(ctx, name, workers, n)
                        r["loadavg_after"] = loadavg()
                        runs.append(r)
                        print(
                            f"  {r['completed']}/{n} completed in {r['wall_s']:.1f} s;"
                            f" {r['rss_kib_per_turn']:.0f} KiB/turn;"
                            f" {r['worker_cpu_us_per_token']:.0f} µs CPU/token;"
                            f" {r['writes_per_token']:.3f} writes/token;"
                            f" ITL +{r['itl_p50_ms']:.1f}/+{r['itl_p99_ms']:.1f} ms;"
                            f" stalls {r['recovering']}, retried {r['retried_activities']};"
                            f" busy {r['cpu_busy'] * 100:.0f}%; load {r['loadavg_after']}",
                            flush=True,
                        )
    finally:
        mock.stop()
        if redis:
            redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        if pg_db:
            with contextlib.suppress(subprocess.CalledProcessError):
                psql(PG_ADMIN, f"DROP DATABASE {pg_db} WITH (FORCE)")
    table, rows = growth(runs)
    meta = run_meta(
        "quick" if args.quick else "full",
        " ".join(["python -m bench.scale", *sys.argv[1:]]),
        load_start,
        server,
    )
    meta["mode"] = (
        f"cost as the work grows: {', '.join(map(str, levels))} concurrent streaming turns"
        f" ({args.tokens} tokens each, first after {FIRST_TOKEN_S * 1000:.0f} ms, then"
        f" {TOKENS_PER_S:.0f}/s) on {' then '.join(map(str, worker_counts))} worker process(es)"
    )
    meta["tables"] = [
        "## Per run\n\n" + level_table(runs),
        "## Growth: per-unit cost ÷ its value at the smallest level\n\n" + table,
        "## Store writes\n\n" + writes_table(runs),
    ]
    raw = {"runs": runs, "settings": {
        "first_token_s": FIRST_TOKEN_S, "tokens_per_s": TOKENS_PER_S, "tokens": args.tokens,
        "stall_timeout_ms": STALL_TIMEOUT_MS, "heartbeat_timeout_s": 30,
        "activity_slots_per_worker": ACTIVITY_SLOTS,
    }}  # fmt: skip
    return rows, raw, meta


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    p.add_argument("--levels", default="10,100,1000", help="concurrent turns per run")
    p.add_argument(
        "--stores", default="sqlite,postgres-redis", help=f"comma-separated: {', '.join(STORES)}"
    )
    p.add_argument("--workers", default="1,2", help="worker processes per run, e.g. 1,2")
    p.add_argument("--tokens", type=int, default=100, help="tokens per turn")
    p.add_argument("--quick", action="store_true", help="a smoke run: 5 and 20 turns, SQLite")
    p.add_argument("--tmp", default="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    p.add_argument("--out", default=None, help="results stem (default scale, quick: scale-quick)")
    args = p.parse_args(argv)
    if args.quick:
        args.levels, args.stores, args.workers, args.tokens = "5,20", "sqlite", "1", 20
    return args


def main(argv: list[str] | None = None) -> int:
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    args = parse(argv)
    started = time.monotonic()
    rows, raw, meta = asyncio.run(run(args))
    meta["seconds"] = round(time.monotonic() - started)
    print(render_text(rows))
    for table in meta["tables"]:
        print("\n" + table)
    stem = args.out or ("scale-quick" if args.quick else "scale")
    print(f"written: {write_results(meta, rows, raw, stem)}")
    return 0 if all(r.status != "MISSED" for r in rows) else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # temporalio on 3.11 can crash at interpreter exit
