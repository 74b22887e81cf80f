"""Group commit for a chunk-stream backend: the appends a process makes within one turn of
the event loop go to the backend together.

A worker streaming many turns appends once per token per turn (``ChunkPublisher`` sends a
token at once when its last append was ``FLUSH_INTERVAL_S`` ago), so at 60 turns of 60
tokens a second it makes 3,600 appends a second. Made one by one, each pays a whole
commit (SQLite: a write transaction and a wake-up datagram per reading process; Redis: a
round trip); grouped, those costs are paid once per group, and groups grow with the load:
the busier the event loop, the more appends one turn of it collects. A quiet loop still
sends each append on its next turn, so grouping adds no latency to speak of.

Each append in a group is checked and numbered as if alone (its stream's owner, its
writer's last batch) and answered on its own: one refused (``StreamNotOwned``) fails alone,
and the others are written.
"""

from __future__ import annotations

import asyncio
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


class AppendGroups:
    """Queues appends and commits each loop turn's appends as one group (``commit``);
    ``grown`` is told the streams a group wrote to (the SQLite backend wakes readers)."""

    def __init__(
        self, commit: CommitGroup, grown: Callable[[dict[str, None]], None] | None = None
    ) -> None:
        self._commit = commit
        self._grown = grown
        self._queued: list[QueuedAppend] = []
        self._running: set[asyncio.Task[None]] = set()

    async def append(self, queued: QueuedAppend) -> int:
        """Queue one append; its last offset once its group is written."""
        loop = asyncio.get_running_loop()
        queued.answer = loop.create_future()
        self._queued.append(queued)
        if len(self._queued) == 1:  # the first of a group: commit it on the next turn
            task = loop.create_task(self._commit_group())
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        return await queued.answer

    async def drain(self) -> None:
        """Wait for the groups already queued (before the backend closes)."""
        for task in list(self._running):
            try:
                await task
            except (Exception, asyncio.CancelledError):
                pass

    async def _commit_group(self) -> None:
        group = [q for q in self._queued if not q.answer.done()]  # a cancelled caller: dropped
        self._queued = []
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
