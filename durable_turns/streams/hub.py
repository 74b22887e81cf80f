"""One reader per stream per process, shared by everyone in the process who follows it.

A browser front door serves many clients the same reply: the one who asked, a second tab, a
reload, ten watchers. Followed one by one, each would read the backend on every append;
through a hub the process reads each stream once and hands every subscriber the same
events. The hub keeps a stream's events in memory while someone follows it (a turn's events,
bounded by what the turn streams) and lets them go with its last subscriber.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from durable_turns.streams.base import TURN_FINISH, ChunkStreamBackend, StreamEvent


@dataclass
class _Shared:
    """What the subscribers of one stream share: its events so far, and their reader."""

    events: list[StreamEvent] = field(default_factory=list)
    grown: asyncio.Event = field(default_factory=asyncio.Event)
    """Set (and replaced) whenever events were added or the reader stopped."""
    primed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once what the stream held when the reader started is in ``events``."""
    reader: asyncio.Task[None] | None = None
    error: BaseException | None = None
    done: bool = False
    subscribers: int = 0

    def grew(self) -> None:
        grown, self.grown = self.grown, asyncio.Event()
        grown.set()


class Subscription:
    """One follower's view of a shared stream: what was there, then what comes."""

    def __init__(self, shared: _Shared) -> None:
        self._shared = shared
        self.present: list[StreamEvent] = list(shared.events)
        """The stream's events when the subscription began (at least one read of it)."""
        self._next = len(self.present)

    async def live(self, idle_timeout: float | None = None) -> AsyncIterator[StreamEvent]:
        """The events after :attr:`present` (and after the last one ``live`` yielded), as
        they arrive, ending after ``turn-finish``; or quietly after ``idle_timeout`` s
        without one (call it again to go on)."""
        shared = self._shared
        idle_since = time.monotonic()
        while True:
            grown = shared.grown
            while self._next < len(shared.events):
                ev = shared.events[self._next]
                self._next += 1
                idle_since = time.monotonic()
                yield ev
                if ev.type == TURN_FINISH:
                    return
            if shared.error is not None:
                raise shared.error
            if shared.done:
                return
            wait = None if idle_timeout is None else idle_timeout - (time.monotonic() - idle_since)
            if wait is not None and wait <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(grown.wait(), wait)


class StreamHub:
    """Shared readers of a backend's streams (see the module's docstring)."""

    def __init__(self, backend: ChunkStreamBackend, *, by_conversation: bool = False) -> None:
        self.backend = backend
        self.by_conversation = by_conversation
        """Read what the turn's conversation's run wrote only (``ChunkStreamBackend.read``)."""
        self._streams: dict[str, _Shared] = {}

    @property
    def followed(self) -> int:
        """Streams read now (one reader each, whatever the number of subscribers)."""
        return len(self._streams)

    @contextlib.asynccontextmanager
    async def open(self, stream_id: str) -> AsyncIterator[Subscription]:
        shared = self._streams.get(stream_id)
        if shared is None:
            shared = self._streams[stream_id] = _Shared()
            shared.reader = asyncio.create_task(self._read(stream_id, shared))
        shared.subscribers += 1
        try:
            await shared.primed.wait()
            if shared.error is not None and not shared.events:
                raise shared.error
            yield Subscription(shared)
        finally:
            shared.subscribers -= 1
            if shared.subscribers == 0 and self._streams.get(stream_id) is shared:
                del self._streams[stream_id]
                if shared.reader is not None:
                    shared.reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await shared.reader

    async def _read(self, stream_id: str, shared: _Shared) -> None:
        try:
            mine = self.by_conversation
            present = await self.backend.read(stream_id, -1, by_conversation=mine)
            shared.events.extend(present)
            shared.primed.set()
            if any(ev.type == TURN_FINISH for ev in present):
                return
            cursor = present[-1].offset if present else -1
            async for ev in self.backend.follow(stream_id, cursor, by_conversation=mine):
                shared.events.append(ev)
                shared.grew()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the subscribers see it
            shared.error = e
        finally:
            shared.done = True
            shared.primed.set()
            shared.grew()
