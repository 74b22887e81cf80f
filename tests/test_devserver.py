"""The embedded Temporal server (``devserver.EmbeddedServer``): how it keeps its SQLite file.

Its file runs in WAL mode with ``synchronous=normal`` (``SQLITE_PRAGMAS``): commits do not wait
on the disk, and still survive any crash of a process. These tests hold both halves: the mode
is really set on the file, and a workflow started before a ``kill -9`` of the server is there
after it restarts on the same file. And a start that lost a port the server picked itself to
another process is tried again.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.client import Client

from durable_turns.devserver import EmbeddedServer
from tests.support.probes import free_port


def journal_mode(db: Path) -> str:
    """The journal mode recorded in the file itself (WAL is persistent; read-only look)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


async def test_the_embedded_server_logs_ahead_and_loses_nothing_to_a_kill(tmp_path: Path) -> None:
    port = free_port()
    server = EmbeddedServer(tmp_path / "temporal", port=port, ui=False)
    await server.start(timeout_s=60)
    workflow_id = f"kept-{uuid.uuid4().hex[:8]}"
    try:
        assert journal_mode(tmp_path / "temporal" / "temporal.db") == "wal"
        client = await Client.connect(server.address)
        # No worker polls this queue: the workflow just has to be recorded.
        await client.start_workflow("NobodyRunsThis", id=workflow_id, task_queue="nobody")
        assert server.process is not None
        os.killpg(server.process.pid, signal.SIGKILL)  # no shutdown, no checkpoint
        server.process.wait()

        server = EmbeddedServer(tmp_path / "temporal", port=port, ui=False)
        await server.start(timeout_s=60)
        client = await Client.connect(server.address)
        described = await client.get_workflow_handle(workflow_id).describe()
        assert described.status == WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING
    finally:
        server.stop()


def test_a_server_that_lost_a_port_it_picked_itself_is_started_again(tmp_path: Path) -> None:
    """The dev server picks its HTTP API port itself: on a busy machine another process can
    take it between the pick and the bind, and the server exits at start. Seen from the log
    and with our own ports still free, that is a race to run again, not a user's mistake."""
    server = EmbeddedServer(tmp_path, port=free_port(), ui_port=free_port())
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "temporal-server.log"
    log.write_text("level=ERROR msg=nothing to do with ports\n")
    assert not server._lost_a_port_race()
    log.write_text(
        'level=ERROR msg="failed listening for HTTP API on 127.0.0.1:44065:'
        ' listen tcp 127.0.0.1:44065: bind: address already in use"\n'
    )
    assert server._lost_a_port_race()
    with socket.socket() as taken:  # our own port taken: the user's to fix, not a race
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server.port = taken.getsockname()[1]
        assert not server._lost_a_port_race()
