"""``turns server`` with real processes (issue 34): the README's commands compose, and the dev
server never outlives the ``turns server`` that started it.

``turns server`` in one shell, ``turns worker`` in another (no ``TEMPORAL_ADDRESS`` in
either): the worker uses that server and leaves it running when it stops. Ending ``turns
server`` any way at all (SIGTERM, SIGKILL) ends its ``temporal server start-dev`` child, and
frees both of its ports.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from durable_turns.devserver import port_free, port_open
from tests.support.harness import ROOT
from tests.support.probes import free_port, wait_until


def server_env(tmp: Path, **extra: str) -> dict[str, str]:
    """No TEMPORAL_ADDRESS: the embedded default, on ports of the test's own."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))},
        "TURNS_DATA_DIR": str(tmp / "data"),
        "TURNS_EMBEDDED_PORT": str(free_port()),
        "TURNS_UI_PORT": str(free_port()),
        "TURNS_TASK_QUEUE": f"server-{uuid.uuid4().hex[:8]}",
        **extra,
    }


class Turns:
    """``turns ARGS`` as a process of its own, its output in a file."""

    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.log = log
        with open(log, "wb") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "durable_turns.cli", *args],
                cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_for(self, text: str, within: float = 90) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None and text not in self.output():
                raise AssertionError(f"exited ({self.proc.returncode}):\n{self.output()}")
            return text in self.output()

        await wait_until(seen, within=within)

    def children(self) -> list[int]:
        """The pids of this process's children (Linux's /proc)."""
        found: list[int] = []
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            found += [int(p) for p in (task / "children").read_text().split()]
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie of a dead parent is reaped by init: not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def run(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_turns.cli", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


async def _started_server(tmp: Path, env: dict[str, str]) -> tuple[Turns, int]:
    server = Turns(env, tmp / f"server-{uuid.uuid4().hex[:6]}.log", "server")
    await server.wait_for("Temporal dev server on")
    [child] = server.children()
    return server, child


async def test_a_worker_uses_the_server_turns_server_started(tmp_path: Path) -> None:
    """Old code: the worker refused the server on the embedded port ("set
    TEMPORAL_ADDRESS=…") though `turns chat`, `turns state` and `turns demo` used it."""
    env = server_env(tmp_path)
    port, ui_port = int(env["TURNS_EMBEDDED_PORT"]), int(env["TURNS_UI_PORT"])
    server, child = await _started_server(tmp_path, env)
    worker = Turns(env, tmp_path / "worker.log", "worker")
    try:
        await worker.wait_for("worker ready")
        used = f"using the Temporal server already running on 127.0.0.1:{port}"
        assert used in worker.output()
        chat = await asyncio.to_thread(run, env, "chat", "composed", "Weather in Lima?")
        assert chat.returncode == 0, chat.stderr
        assert "forecast for Lima" in chat.stdout

        again = await asyncio.to_thread(run, env, "server", timeout=30)
        assert again.returncode == 1
        assert f"a Temporal server already runs on 127.0.0.1:{port}" in again.stderr
        assert len(again.stderr.strip().splitlines()) == 1, again.stderr

        worker.stop()
        assert worker.proc.returncode == 0, worker.output()
        assert alive(child) and port_open("127.0.0.1", port)  # the worker left it running
        state = await asyncio.to_thread(run, env, "transcript", "composed")
        assert state.returncode == 0 and "forecast for Lima" in state.stdout
    finally:
        worker.stop()
        server.stop()
    assert server.proc.returncode == 0, server.output()
    assert "Temporal dev server stopped." in server.output()
    await wait_until(lambda: not alive(child), within=15)
    assert port_free("127.0.0.1", port) and port_free("127.0.0.1", ui_port)


async def test_the_dev_server_ends_with_turns_server_however_it_ends(tmp_path: Path) -> None:
    """Old code: a SIGTERM or SIGKILL of `turns server` orphaned `temporal server start-dev`,
    which kept both ports."""
    for how in (signal.SIGKILL, signal.SIGTERM):
        env = server_env(tmp_path)
        port, ui_port = int(env["TURNS_EMBEDDED_PORT"]), int(env["TURNS_UI_PORT"])
        server, child = await _started_server(tmp_path, env)
        try:
            assert alive(child) and port_open("127.0.0.1", port)
            os.kill(server.proc.pid, how)
            server.proc.wait(20)
            await wait_until(lambda: not alive(child), within=15)  # noqa: B023
            await wait_until(
                lambda: port_free("127.0.0.1", port) and port_free("127.0.0.1", ui_port),  # noqa: B023
                within=15,
            )
        finally:
            server.stop()
            if alive(child):  # the bug: do not leave it to the next test
                os.kill(child, signal.SIGKILL)
        if how == signal.SIGTERM:
            assert server.proc.returncode == 0, server.output()
