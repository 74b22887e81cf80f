"""What the front door tells a browser while no worker runs its chat, and what its health
check says: a reply waiting for a worker (or queued for a busy worker's activity slot), a
door shutting down.

The door asks the Temporal server (``durable_turns.presence``), never a worker: whether
workers poll the task queue (cached for ``WORKERS_TTL_S``, so however many responses wait,
one process asks at most about once a second), and, for one conversation, whether its
workflow task or its running turn's task waits unstarted (no worker takes it, or every
worker's activity slots are busy: ``queued``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from durable_turns.client import TurnsClient
from durable_turns.presence import QUEUED, Workers

WORKERS_TTL_S = 1.0
"""How long the door reuses its answer to "do workers poll the task queue?"."""

WORKER_CHECK_S = 1.0
"""A response with nothing to send for this long looks at the workers (the cached answer)."""

TASK_CHECK_S = 5.0
"""A reply with no event for this long looks at its turn's tasks (a describe of the
conversation and of the turn), and again each time as long: an activity retried after its
worker died, that no worker takes, says ``waiting for a worker``; one that waits while
workers poll, ``queued`` (their activity slots are busy)."""

WAITING = "data-waiting"
"""The transient chunk a response sends when its reply waits for a worker (``data``:
``waiting_for: "worker"`` and a ``message``) or for a busy worker's activity slot
(``waiting_for: "activity_slot"``, ``message``: ``queued: …``), and again when the reason
changes."""

RESUME = "data-resume"
"""The transient chunk a response sends before the door ends it at shutdown: resume the
reply (``GET /api/chat/{id}/stream``) from this or another replica."""


class WorkerWatch:
    """The door's view of the workers: one cached ``DescribeTaskQueue`` pair per second."""

    def __init__(self, client: TurnsClient) -> None:
        self.client = client
        self._at = -1e9
        self._workers: Workers | None = None
        self._error: str | None = None
        self._lock = asyncio.Lock()

    async def workers(self) -> Workers | None:
        """The task queue's workers; None when the server did not answer (see :attr:`error`)."""
        if time.monotonic() - self._at >= WORKERS_TTL_S:
            async with self._lock:
                if time.monotonic() - self._at >= WORKERS_TTL_S:
                    try:
                        self._workers, self._error = await self.client.workers(), None
                    except Exception as e:  # an RPC error, a timeout: Temporal does not answer
                        self._workers, self._error = None, f"{type(e).__name__}: {e}"[:300]
                    self._at = time.monotonic()
        return self._workers

    @property
    def error(self) -> str | None:
        """Why the last look at the workers failed (Temporal did not answer), or None."""
        return self._error

    async def problem(self, conversation_id: str, turn_number: int | None = None) -> str | None:
        """``waiting for a worker: …`` when no worker polls the task queue (cached), or the
        conversation's (or its turn's) task waits unstarted (one or two describes);
        ``queued: …`` when it waits for a busy worker's activity slot."""
        known = await self.workers()
        if known is not None and (problem := known.problem()):
            return problem
        return await self.client.waiting_for_worker(conversation_id, turn_number, known=known)

    async def health(self) -> tuple[bool, dict[str, Any]]:
        """``/api/health``'s verdict and body: Temporal answers, and workers poll."""
        known = await self.workers()
        temporal: dict[str, Any] = {"ok": known is not None}
        if self._error:
            temporal["error"] = self._error
        body: dict[str, Any] = {"temporal": temporal}
        if known is not None:
            body["workers"] = {
                "ok": known.polling,
                "task_queue": known.task_queue,
                "workflow_pollers": len(known.workflow),
                "activity_pollers": len(known.activity),
            }
        ok = known is not None and known.polling
        return ok, body


def waiting_chunk(message: str | None) -> dict[str, Any]:
    """The ``data-waiting`` chunk: the page shows "waiting for a worker" (or "queued for a
    worker's slot") until the reply streams (``message`` None: no longer waiting)."""
    reason = None if not message else "activity_slot" if message.startswith(QUEUED) else "worker"
    return {
        "type": WAITING,
        "transient": True,
        "data": {"waiting_for": reason, "message": message},
    }


def resume_chunk() -> dict[str, Any]:
    return {
        "type": RESUME,
        "transient": True,
        "data": {"reason": "the server is shutting down: resume the stream"},
    }
