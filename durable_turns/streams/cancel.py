"""Cancel marks: how a cancelChat reaches a streaming model step without a heartbeat.

A cancel reaches a Temporal activity only in the answer to one of its heartbeats, so a step
that had to stop within half a second of a cancelChat used to heartbeat four times a second:
a server round trip, a server write and (on Temporal Cloud) a billable action each. Liveness
needs far fewer. So cancellation takes another road, through the chunk-stream backend the
step already writes to: whoever cancels leaves a *mark* for the request there (the client
and the front door before they signal, the conversation workflow when it cancels its turn,
``activities.conversation.mark_cancel``), and each worker process looks for the marks of
all the steps it runs in one read every ``TURNS_CANCEL_CHECK_MS / 2``. A step that finds
its mark stops as on a cancellation (what it streamed is kept, the turn ends ``aborted``).
Temporal's own activity cancellation stays the fallback: the turn still cancels the
activity, which learns of it at its next (now rare) heartbeat.

A mark names a conversation's request (``mark_key``): a request id runs at most once, so a
mark can never stop another turn; marks are kept :data:`~durable_turns.streams.base.MARK_TTL_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator

from durable_turns.streams.base import ChunkStreamBackend

log = logging.getLogger(__name__)


def mark_key(conversation_id: str, request_id: str) -> str:
    """The mark of one request of one conversation."""
    return json.dumps([conversation_id, request_id], ensure_ascii=False, separators=(",", ":"))


async def mark_cancel(backend: ChunkStreamBackend, conversation_id: str, request_id: str) -> bool:
    """Leave the mark that stops the request's running model step (False: the backend
    keeps no marks, and only Temporal's cancellation reaches the step)."""
    return await backend.mark_cancel(mark_key(conversation_id, request_id))


class CancelWatch:
    """One process's look-out for the cancel marks of the steps it runs: while any step is
    watched, one ``cancel_marks`` read per ``interval_s`` for all of them."""

    def __init__(self, backend: ChunkStreamBackend, interval_s: float) -> None:
        self.backend = backend
        self.interval_s = interval_s
        self.reads = 0
        """How many reads the look-out made (one per interval while a step is watched)."""
        self._watched: dict[str, list[Callable[[], None]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._warned_at = -float("inf")

    @property
    def watched(self) -> int:
        return len(self._watched)

    @contextlib.contextmanager
    def watch(self, key: str, on_mark: Callable[[], None]) -> Iterator[None]:
        """Call ``on_mark`` (once, from the look-out's task) if ``key`` gets marked while
        the block runs; never after it ends."""
        fired = False

        def once() -> None:
            nonlocal fired
            if not fired:
                fired = True
                on_mark()

        callbacks = self._watched.setdefault(key, [])
        callbacks.append(once)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._look_out())
        try:
            yield
        finally:
            callbacks.remove(once)
            if not callbacks and self._watched.get(key) is callbacks:
                del self._watched[key]

    async def _look_out(self) -> None:
        while self._watched:
            await asyncio.sleep(self.interval_s)
            keys = list(self._watched)
            if not keys:
                break
            try:
                marked = await self.backend.cancel_marks(keys)
            except Exception as e:  # the fallback (Temporal's cancellation) still holds
                now = time.monotonic()
                if now - self._warned_at > 60:
                    self._warned_at = now
                    log.warning("cancel marks could not be read (will retry): %r", e)
                continue
            finally:
                self.reads += 1
            for key in marked:
                for callback in list(self._watched.get(key, ())):
                    callback()
