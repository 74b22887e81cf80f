"""Blocking code on the event loop, found and named in the worker's log.

Every turn of a worker shares one asyncio event loop, so user code runs off it: plain
``def`` tools and hooks in threads, ``async def`` ones on user loops (``isolation``). A
watchdog thread per loop (the worker's and each user loop) pings it and, when a ping waits
longer than ``LAG_S``, logs what holds it: the tool or hook running (``running(label)``) and
where its code is. On a user loop only the calls on that loop wait; on the worker's loop
(isolation off, or engine code) every turn of the worker does.
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
_callback_labels: dict[int, str] = {}
"""``id(loop)`` → what the plain callback running on that loop runs (no task to label)."""


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


@contextlib.contextmanager
def running_here(label: str) -> Iterator[None]:
    """Like ``running``, for a plain callback of the running loop (a stream transform)."""
    loop = asyncio.get_running_loop()
    watch(loop)
    _callback_labels[id(loop)] = label
    try:
        yield
    finally:
        _callback_labels.pop(id(loop), None)


def watch(loop: asyncio.AbstractEventLoop, user: int | None = None) -> None:
    """Start the watchdog of ``loop`` (once; it is called from the loop's thread).
    ``user``: the number of the user loop it is (None: the worker's loop)."""
    if id(loop) not in _watched:
        _watched[id(loop)] = _Watch(loop, threading.get_ident(), user)


def _current_label(loop: asyncio.AbstractEventLoop) -> str | None:
    current = getattr(asyncio.tasks, "_current_tasks", {})
    task = current.get(loop) if hasattr(current, "get") else None
    label = _labels.get(id(task)) if task is not None else None
    return label or _callback_labels.get(id(loop))


class _Watch:
    def __init__(self, loop: asyncio.AbstractEventLoop, thread_id: int, user: int | None) -> None:
        self.loop = loop
        self.thread_id = thread_id
        self.user = user
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
                    "event loop%s free again after %.1fs of blocking",
                    self._name(),
                    time.monotonic() - started,
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
        if self.user is None:
            who = "every turn on this worker waits"
        else:
            who = "only the calls on this user loop wait, the worker's loop and other turns go on"
        log.warning(
            "event loop blocked%s for over %.1fs by %s%s: async code that blocks (time.sleep,"
            " blocking I/O) holds its event loop (%s); make it a plain def (it then runs"
            " in a thread) or await non-blocking calls",
            self._name(),
            LAG_S,
            label,
            where,
            who,
        )

    def _name(self) -> str:
        return "" if self.user is None else f" (user loop {self.user})"
