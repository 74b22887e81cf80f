"""Blocking code on the event loop, found and named in the worker's log.

Every turn of a worker shares one asyncio event loop, so user code runs off it: plain
``def`` tools and hooks in threads, ``async def`` ones on user loops (``isolation``). One
watchdog thread pings every watched loop (the worker's and each user loop) each
``LAG_S / 4`` and, when a ping waits longer than ``LAG_S``, logs what holds that loop: the
tool or hook running (``running(label)``) and where its code is. On a user loop only the
calls on that loop wait; on the worker's loop (isolation off, or engine code) every turn of
the worker does.

A ping costs its loop one wake-up and the watchdog nothing more: the answer is a stamp the
watchdog reads on its next round, not a thread it wakes (a thread per loop, each woken by
its loop's answer, made a process with seven loops wake ~240 times a second, now ~100).
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
_watchdog: threading.Thread | None = None
"""The one thread that watches every loop (started by the first ``watch``)."""
_starting = threading.Lock()


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
    """Start watching ``loop`` (once; it is called from the loop's thread).
    ``user``: the number of the user loop it is (None: the worker's loop)."""
    global _watchdog
    if id(loop) in _watched:
        return
    _watched[id(loop)] = _Watch(loop, threading.get_ident(), user)
    with _starting:
        if _watchdog is None:
            _watchdog = threading.Thread(target=_watch_all, name="turns-loopwatch", daemon=True)
            _watchdog.start()


def _watch_all() -> None:
    """The watchdog: each round, a ping to every loop whose last one was answered, a report
    for every loop whose ping has waited ``LAG_S``."""
    while True:
        time.sleep(LAG_S / 4)
        now = time.monotonic()
        for watched in list(_watched.values()):
            watched.check(now)


def _current_label(loop: asyncio.AbstractEventLoop) -> str | None:
    task = asyncio.current_task(loop)
    label = _labels.get(id(task)) if task is not None else None
    return label or _callback_labels.get(id(loop))


class _Watch:
    """One watched loop: its outstanding ping (``pinged_at``), answered on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread_id: int, user: int | None) -> None:
        self.loop = loop
        self.thread_id = thread_id
        self.user = user
        self.pinged_at: float | None = None
        """When the unanswered ping was sent (None: the last one was answered)."""
        self.reported = False

    def check(self, now: float) -> None:
        """On the watchdog's thread: ping the loop, or report it if the ping still waits."""
        if self.loop.is_closed():  # a ping it had not answered included
            _watched.pop(id(self.loop), None)
            return
        pinged_at = self.pinged_at
        if pinged_at is None:
            self.pinged_at = now  # before the ping is posted: its answer clears it
            try:
                self.loop.call_soon_threadsafe(self._pong)
            except RuntimeError:  # the loop is closed
                _watched.pop(id(self.loop), None)
        elif not self.reported and now - pinged_at >= LAG_S:
            self.reported = True
            self._report()

    def _pong(self) -> None:
        """On the loop: the ping is answered."""
        pinged_at, self.pinged_at = self.pinged_at, None
        if self.reported and pinged_at is not None:
            self.reported = False
            log.warning(
                "event loop%s free again after %.1fs of blocking",
                self._name(),
                time.monotonic() - pinged_at,
            )

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
