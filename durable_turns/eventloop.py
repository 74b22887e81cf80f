"""The worker's event loop: while it is busy, it waits for network I/O at most once per interval.

A worker streaming many turns is woken by every token of every stream, at random phases (six
turns at 60 tokens a second: a wake-up every 3 ms). Each wake-up of a thread that waited costs
CPU of its own, apart from the work it wakes for. On a virtual machine that cost is large:
``python -m bench.wake_cost`` measured about 110 µs for a wake-up after a 1 ms wait and 350 µs
after a 10 ms one, 14-46 times a turn of the loop that did not wait. ``bench.cost`` charges
it to the engine.

:class:`CoalescingSelector` is the selector of the worker's loop (``TURNS_LOOP_COALESCE_MS``,
:func:`loop_factory`). When the loop is about to wait, and it last looked for I/O less than
``coalesce_s`` ago, it looks again without waiting: whatever is ready is handled at once;
if nothing is, it sleeps out the rest of the interval and then waits as usual, so what came
meanwhile is handled in one wake-up. It does so only while the loop is busy: while its I/O
events came more than twice per interval over the last ten intervals (over 100 a second at
the default 20 ms; one turn streaming at 60 tokens a second brings about 60, six about 360).
A quieter loop (one turn streaming, whose tokens and Temporal tasks come one after another)
is woken at once by each event, as the default loop is; a busy one at most once per
interval, and an event waits at most that long. Timers keep their time: the sleep never
outlasts the wait the loop asked for.

What other threads hand the loop is never held back: Temporal's tasks (a workflow
activation, an activity or local activity to run, an answer of the server), results of the
thread pools, a user loop's hook results. asyncio brings them in by a local stream socket
of its own (its self-pipe, made with :func:`socket.socketpair`), so the sleep is a wait on
local stream sockets only (:func:`local_stream`): such an event wakes the loop at once, and
the loop handles it with whatever else is ready then (should asyncio ever bring them in
otherwise, they would wait up to an interval again: ``tests/test_eventloop.py`` checks that
a busy loop runs another thread's call at once). What the interval coalesces is the
network: model streams, a Redis or PostgreSQL connection. Before, a busy worker held each
of a starting turn's hops (its workflow task, ``begin_turn``, the model step) up to an
interval, and in bursts (``python -m bench.starts``) a turn's first workflow task took
p50 73-81 ms where it now takes 21-36 ms, as with coalescing off; paired rounds show no
CPU cost per token (``docs/costs.md``).
"""

from __future__ import annotations

import asyncio
import selectors
import socket
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

_T = TypeVar("_T")


BUSY_EVENTS_PER_INTERVAL = 2
"""The loop coalesces while I/O events came more often than this per interval (over the last
:data:`WINDOW_INTERVALS` intervals): only then does one wake-up per interval save any."""

WINDOW_INTERVALS = 10
"""How many intervals (at least) the event count that decides it spans."""


class CoalescingSelector(selectors.DefaultSelector):
    """The platform's default selector, waiting for network I/O at most once per ``coalesce_s``
    while busy; local stream sockets (:func:`local_stream`) wake it at once."""

    def __init__(self, coalesce_s: float) -> None:
        if coalesce_s <= 0:
            raise ValueError("coalesce_s must be > 0")
        super().__init__()
        self.coalesce_s = coalesce_s
        self.busy = False
        """Whether the loop coalesces now: the last window's I/O events came more often than
        :data:`BUSY_EVENTS_PER_INTERVAL` per interval."""
        self._looked = -float("inf")
        """When the loop last looked for I/O (``time.monotonic``)."""
        self._window_began = time.monotonic()
        self._events = 0
        """The I/O events seen since ``_window_began``."""
        self._prompt = selectors.DefaultSelector()
        """The registered local stream sockets (:func:`local_stream`): the sleep waits on
        these, so their events are never held back."""

    def register(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        key = super().register(fileobj, events, data)
        if local_stream(key.fd):
            self._prompt.register(key.fd, events)
        return key

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        key = super().unregister(fileobj)
        if key.fd in self._prompt.get_map():
            self._prompt.unregister(key.fd)
        return key

    def modify(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        key = super().modify(fileobj, events, data)
        if key.fd in self._prompt.get_map():
            self._prompt.modify(key.fd, events)
        return key

    def close(self) -> None:
        self._prompt.close()
        super().close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if self.busy and (timeout is None or timeout > 0):
            rest = self._looked + self.coalesce_s - time.monotonic()
            if rest > 0:  # looked a moment ago: what is ready now, or all that comes by then
                ready = super().select(0)
                if ready:
                    return self._saw(ready)
                nap = rest if timeout is None else min(rest, timeout)
                began = time.monotonic()
                if self._prompt.get_map():
                    self._prompt.select(nap)  # a local stream's event ends it at once
                else:
                    time.sleep(nap)
                napped = time.monotonic() - began
                timeout = None if timeout is None else max(timeout - napped, 0.0)
        return self._saw(super().select(timeout))

    def _saw(
        self, ready: list[tuple[selectors.SelectorKey, int]]
    ) -> list[tuple[selectors.SelectorKey, int]]:
        """Note a look for I/O and its events; at a window's end, decide ``busy``."""
        self._looked = now = time.monotonic()
        self._events += len(ready)
        spanned = now - self._window_began
        if spanned >= self.coalesce_s * WINDOW_INTERVALS:
            self.busy = self._events > BUSY_EVENTS_PER_INTERVAL * spanned / self.coalesce_s
            self._window_began, self._events = now, 0
        return ready


def local_stream(fd: int) -> bool:
    """Whether ``fd`` is a local stream socket (``AF_UNIX``, ``SOCK_STREAM``): in a
    worker's loop, asyncio's self-pipe, by which other threads hand it work."""
    try:
        sock = socket.socket(fileno=fd)  # family and type read from the descriptor
    except OSError:  # not a socket (a pipe, a file)
        return False
    try:
        return sock.family == socket.AF_UNIX and sock.type == socket.SOCK_STREAM
    finally:
        sock.detach()  # the descriptor stays its owner's


def loop_factory(coalesce_ms: int) -> Callable[[], asyncio.AbstractEventLoop]:
    """A factory of the worker's event loop (``asyncio.Runner(loop_factory=...)``): the
    default loop when ``coalesce_ms`` is 0."""
    if coalesce_ms < 0:
        raise ValueError("coalesce_ms must be >= 0")
    if coalesce_ms == 0:
        return asyncio.new_event_loop

    def new_loop() -> asyncio.AbstractEventLoop:
        return asyncio.SelectorEventLoop(CoalescingSelector(coalesce_ms / 1000))

    return new_loop


def run(main: Coroutine[Any, Any, _T], coalesce_ms: int) -> _T:
    """``asyncio.run(main)`` on a loop of :func:`loop_factory`."""
    with asyncio.Runner(loop_factory=loop_factory(coalesce_ms)) as runner:
        return runner.run(main)
