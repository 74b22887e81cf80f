"""Group commit for a chunk-stream backend: the appends a process makes within one turn of
the event loop go to the backend together.

A worker streaming many turns appends once per token per turn (``ChunkPublisher`` sends a
token at once when its last append was ``FLUSH_INTERVAL_S`` ago), so at 60 turns of 60
tokens a second it makes 3,600 appends a second. Made one by one, each pays a whole
commit (SQLite: a write transaction and a wake-up datagram per reading process; Redis: a
round trip); grouped, those costs are paid once per group, and groups grow with the load:
the busier the event loop, the more appends one turn of it collects. A quiet loop still
sends each append on its next turn, so grouping adds no latency to speak of.

A backend may also space its groups (``interval_s``, SQLite: :data:`COMMIT_INTERVAL_S`):
an append that finds the last group begun less than that long ago, with another stream's
appends in it, waits for the rest of the interval, and the appends made meanwhile join it.
A stream's own appends are spaced by its publisher already, so one turn streaming alone
never waits, nor do its boundaries; many turns at once share their commits (at most one
per interval), each append waiting at most one interval.

Each append in a group is checked and numbered as if alone (its stream's owner, its
writer's last batch) and answered on its own: one refused (``StreamNotOwned``) fails alone,
and the others are written.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


@dataclass
class QueuedAppend:
    """One append waiting for its group (``ChunkStreamBackend.append``'s arguments, the
    events already encoded as one batch body)."""

    stream_id: str
    body: str
    n: int
    """How many events the body holds."""
    owner: str | None
    by_conversation: bool
    writer: str | None
    seq: int
    answer: asyncio.Future[int] = field(init=False)
    """Its last offset, or why it failed."""


CommitGroup = Callable[[list[QueuedAppend]], Awaitable[list[int | Exception]]]
"""Writes a group; per append (in order) its last offset or why it failed (its refusal,
``StreamNotOwned``). Raising fails every append of the group; each caller retries with
its same ``(writer, seq)``, so one that was written after all is not written twice."""


COMMIT_INTERVAL_S = 0.02
"""The SQLite backend's shortest time between two groups of one process when they write
to different streams: with many turns at once a token waits at most this long, and a
commit (a write transaction and a wake-up per reading process) serves several. The same
as the worker loop's default coalescing interval (``TURNS_LOOP_COALESCE_MS``, 20 ms), so a
busy worker pays one commit per wake-up of its loop: against 10 ms, the worker's CPU per
token fell by a fifth to a third in paired rounds (``docs/costs.md``)."""


class AppendGroups:
    """Queues appends and commits each loop turn's appends as one group (``commit``); a
    group begun within ``interval_s`` of the last one, which wrote to another stream, waits
    for the interval's end (0: never); ``grown`` is told the streams a group wrote to (the
    SQLite backend wakes readers)."""

    def __init__(
        self,
        commit: CommitGroup,
        grown: Callable[[dict[str, None]], None] | None = None,
        interval_s: float = 0.0,
    ) -> None:
        if interval_s < 0:
            raise ValueError("interval_s must be >= 0")
        self._commit = commit
        self._grown = grown
        self.interval_s = interval_s
        self._queued: list[QueuedAppend] = []
        self._running: set[asyncio.Task[None]] = set()
        self._began = -math.inf
        """When the last group began (the event loop's clock)."""
        self._began_streams: set[str] = set()
        """The streams the last group wrote to."""

    def submit(self, queued: QueuedAppend) -> asyncio.Future[int]:
        """Queue one append; its ``answer`` (its last offset), set once its group is written:
        a future, for a backend's own ``append`` to await with no coroutine between (a
        worker streaming many turns queues one per token per turn)."""
        loop = asyncio.get_running_loop()
        queued.answer = answer = loop.create_future()
        queued_now = self._queued
        queued_now.append(queued)
        if len(queued_now) == 1:  # the first of a group: commit it on the next turn
            wait = 0.0
            began = self._began_streams
            if began and (len(began) > 1 or queued.stream_id not in began):  # others' appends
                wait = self._began + self.interval_s - loop.time()
            task = loop.create_task(self._commit_group(wait))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        return answer

    async def drain(self) -> None:
        """Wait for the groups already queued (before the backend closes)."""
        for task in list(self._running):
            try:
                await task
            except (Exception, asyncio.CancelledError):
                pass

    async def _commit_group(self, wait: float) -> None:
        if wait > 0:  # the last group began less than an interval ago
            try:
                await asyncio.sleep(wait)
            except asyncio.CancelledError:  # never committed: its callers are told so
                queued, self._queued = self._queued, []
                for q in queued:
                    q.answer.cancel()
                raise
        group = [q for q in self._queued if not q.answer.done()]  # a cancelled caller: dropped
        self._queued = []
        self._began = asyncio.get_running_loop().time()
        self._began_streams = {q.stream_id for q in group}
        if not group:
            return
        try:
            results = await self._commit(group)
        except BaseException as e:
            for q in group:
                if q.answer.done():
                    continue
                if isinstance(e, Exception):
                    q.answer.set_exception(e)
                else:
                    q.answer.cancel()
            if not isinstance(e, Exception):
                raise
            return
        grown: dict[str, None] = {}
        for q, result in zip(group, results, strict=True):
            if isinstance(result, Exception):
                if not q.answer.done():
                    q.answer.set_exception(result)
                continue
            grown[q.stream_id] = None
            if not q.answer.done():
                q.answer.set_result(result)
        if self._grown is not None and grown:
            self._grown(grown)
