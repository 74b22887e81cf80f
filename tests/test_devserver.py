"""The embedded Temporal server (``devserver.EmbeddedServer``): how it keeps its SQLite file.

Its file runs in WAL mode with ``synchronous=normal`` (``SQLITE_PRAGMAS``): commits do not wait
on the disk, and still survive any crash of a process. These tests hold both halves: the mode
is really set on the file, and a workflow started before a ``kill -9`` of the server is there
after it restarts on the same file.
"""

from __future__ import annotations

import os
import signal
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
