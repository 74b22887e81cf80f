"""Blocking code on the event loop, found and named in the worker's log.

Every turn of a worker shares one asyncio event loop: an ``async def`` tool or hook that
calls ``time.sleep`` or a blocking client holds it, and every other conversation's
activities wait. Plain ``def`` tools and hooks run in threads and cannot do that; for async
code this watchdog thread pings the loop and, when a ping waits longer than ``LAG_S``, logs
what holds it: the tool or hook running (``running(label)``) and where its code is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
import traceback
from collections.abc import Iterator

LAG_S = 1.0
"""A ping of the event loop that waits this long is reported."""

log = logging.getLogger("durable_turns.loop")

_labels: dict[int, str] = {}
"""``id(task)`` → what that task runs, e.g. ``tool get_weather``."""
_watched: dict[int, _Watch] = {}


@contextlib.contextmanager
def running(label: str) -> Iterator[None]:
    """Mark what the current task runs, so a stall can be blamed on it by name."""
    task = asyncio.current_task()
    if task is None:
        yield
        return
    watch(asyncio.get_running_loop())
    key = id(task)
    previous = _labels.get(key)
    _labels[key] = label
    try:
        yield
    finally:
        if previous is None:
            _labels.pop(key, None)
        else:
            _labels[key] = previous


def watch(loop: asyncio.AbstractEventLoop) -> None:
    """Start the watchdog of ``loop`` (once; it is called from the loop's thread)."""
    if id(loop) not in _watched:
        _watched[id(loop)] = _Watch(loop, threading.get_ident())


def _current_label(loop: asyncio.AbstractEventLoop) -> str | None:
    current = getattr(asyncio.tasks, "_current_tasks", {})
    task = current.get(loop) if hasattr(current, "get") else None
    return _labels.get(id(task)) if task is not None else None


class _Watch:
    def __init__(self, loop: asyncio.AbstractEventLoop, thread_id: int) -> None:
        self.loop = loop
        self.thread_id = thread_id
        threading.Thread(target=self._run, name="turns-loopwatch", daemon=True).start()

    def _run(self) -> None:
        pong = threading.Event()
        while True:
            pong.clear()
            try:
                self.loop.call_soon_threadsafe(pong.set)
            except RuntimeError:  # the loop is closed
                _watched.pop(id(self.loop), None)
                return
            started = time.monotonic()
            if not pong.wait(LAG_S):
                self._report()
                pong.wait()
                log.warning(
                    "event loop free again after %.1fs of blocking", time.monotonic() - started
                )
            time.sleep(LAG_S / 4)

    def _report(self) -> None:
        label = _current_label(self.loop) or "code outside any tool or hook"
        frame = sys._current_frames().get(self.thread_id)
        where = ""
        if frame is not None:
            stack = traceback.extract_stack(frame)[-3:]
            where = " at " + " ← ".join(
                f"{f.name} ({f.filename}:{f.lineno})" for f in reversed(stack)
            )
        log.warning(
            "event loop blocked for over %.1fs by %s%s: async code that blocks (time.sleep,"
            " blocking I/O) stalls every turn on this worker; make it a plain def (it then runs"
            " in a thread) or await non-blocking calls",
            LAG_S,
            label,
            where,
        )
