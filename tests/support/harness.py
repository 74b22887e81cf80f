"""Real worker processes and a per-test harness around them."""

from __future__ import annotations

import compileall
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client

from durable_turns.client import TurnsClient
from durable_turns.contract import TurnResult
from durable_turns.store import TranscriptStore, open_store

ROOT = Path(__file__).resolve().parents[2]

SOURCE_FOLDERS = ("durable_turns", "activities", "workflows", "hooks", "tests/support")
"""The project's code that worker processes import (durable_turns' symlinked folders too:
``compileall`` does not follow symlinks)."""


def compile_sources() -> None:
    """Write the bytecode of the modules every worker process imports, once per session.

    With ``PYTHONDONTWRITEBYTECODE`` set (this project's machines and CI set it) no process
    writes a ``.pyc``, so each of the suite's hundreds of worker processes compiled the
    project's ~60 modules from source at start, and temporalio's default build id (a hash of
    every loaded module's bytecode) compiled them a second time: about a fifth of a worker's
    time to ready. Python still reads a ``.pyc`` it finds (checked against its source's mtime
    and size): compiled here, every worker starts from the cache. Modules a test writes stay
    uncached, as before.
    """
    for folder in SOURCE_FOLDERS:
        compileall.compile_dir(ROOT / folder, quiet=1)
    compileall.compile_dir(ROOT / "tests", maxlevels=0, quiet=1)


class WorkerProcess:
    """``python worker.py`` as a real child process (so tests can ``kill -9`` it); another
    command with ``args`` (ready when it prints ``marker``), run in ``cwd``."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        args: list[str] | None = None,
        marker: bytes = b"worker ready",
        cwd: Path = ROOT,
    ) -> None:
        self.log_path = log_path
        self._marker = marker
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, *(args or [str(ROOT / "worker.py")])],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
        )
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            self._log.flush()
            if self._marker in line:
                self._ready.set()

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited ({self.proc.returncode}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker not ready in {timeout}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        self._log.flush()
        return self.log_path.read_bytes()[-n:].decode(errors="replace")

    def kill(self) -> None:
        """``kill -9``: no cleanup, no goodbye."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def terminate(self) -> None:
        """SIGTERM (a deploy's stop), without waiting for the process to exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        self.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()
        self._log.close()


class Harness:
    """One test's world: a task queue, a SQLite store file and worker processes."""

    def __init__(self, client: Client, address: str, tmp: Path) -> None:
        self.client = client
        self.address = address
        self.tmp = tmp
        self.task_queue = f"tq-{uuid.uuid4().hex[:10]}"
        self.store_url = f"sqlite:///{tmp / 'transcripts.db'}"
        self.tool_log = tmp / "tools.jsonl"
        self.hook_log = tmp / "hooks.jsonl"
        self.turns = TurnsClient(client, self.task_queue)
        self.workers: list[WorkerProcess] = []
        self._store: TranscriptStore | None = None

    def conv(self, name: str) -> str:
        """A conversation id unique to this test (the dev server outlives each test)."""
        return f"{name}-{self.task_queue[3:]}"

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": self.address,
            "TURNS_TASK_QUEUE": self.task_queue,
            "TURNS_STORE_URL": self.store_url,
            "TURNS_DATA_DIR": str(self.tmp / "data"),
            "TURNS_DEMO_DIR": str(self.tmp),
            "TURNS_TOOLS": "tests.support.tools",
            "TURNS_HEARTBEAT_TIMEOUT_S": "2",
            "TEST_TOOL_LOG": str(self.tool_log),
            "TEST_HOOK_LOG": str(self.hook_log),
            "PYTHONPATH": str(ROOT),
        }
        env.update(extra)
        return env

    def start_worker(self, **env: str) -> WorkerProcess:
        worker = WorkerProcess(self.env(**env), self.tmp / f"worker-{len(self.workers)}.log")
        self.workers.append(worker)
        worker.wait_ready()
        return worker

    def script(self, steps: Any, name: str = "script") -> str:
        """Write a demo script into the workers' ``TURNS_DEMO_DIR``; returns its model id."""
        path = self.tmp / f"{name}-{uuid.uuid4().hex[:6]}.json"
        path.write_text(json.dumps(steps))
        return f"demo:{path.name}"

    async def store(self) -> TranscriptStore:
        if self._store is None:
            self._store = open_store(self.store_url)
            await self._store.open()
        return self._store

    async def send(self, conversation: str, text: str, **kw: Any) -> TurnResult:
        return await self.turns.send(conversation, text, **kw)

    def tool_runs(self) -> list[dict[str, Any]]:
        if not self.tool_log.exists():
            return []
        return [json.loads(line) for line in self.tool_log.read_text().splitlines()]

    def assert_tool_ran_again_to_its_end_once(self) -> None:
        """The one tool call was started twice under one call id (its first worker died) and
        ran to its end once."""
        runs = self.tool_runs()
        starts = [r for r in runs if r["phase"] == "start"]
        assert len(starts) == 2 and starts[0]["id"] == starts[1]["id"], "rerun, same call id"
        assert [r["phase"] for r in runs].count("end") == 1, "the tool ran to its end once"

    def hook_calls(self) -> list[dict[str, Any]]:
        if not self.hook_log.exists():
            return []
        return [json.loads(line) for line in self.hook_log.read_text().splitlines()]

    async def close(self) -> None:
        for worker in self.workers:  # all at once: each one's graceful shutdown overlaps
            worker.terminate()
        for worker in self.workers:
            worker.stop()
        if self._store is not None:
            await self._store.close()
