"""User async code on loops of its own, so a blocking call stalls only its own turn.

Every activity of a worker shares one asyncio event loop: model streams, heartbeats, the
stores, every conversation's turn. An ``async def`` tool, hook or extension, a stream
transform or ``on_chunk`` that blocks (``time.sleep``, a blocking client) would hold it and
every other turn would wait. So user code runs on **user loops**: event loops of their own,
each on its own thread, in a pool of at most ``USER_LOOPS`` (``TURNS_USER_LOOPS``).

* A call (a tool run, one hook call) gets a loop that runs nothing else; a loop is handed
  back when the call's coroutine has ended (not when its caller gave up on it), so a loop
  still blocked by a cancelled call is not given to the next one. Only when every loop of a
  full pool is busy do calls share one (the least busy): a blocking call there delays the
  calls on its loop, and the loop watchdog (``loopwatch``) names it.
* A step's ``on_chunk`` stage and its stream transforms keep one loop for the whole step,
  so their state sees one loop and chunks stay in order; ``on_chunk`` gets its chunks in
  batches, one wake-up of its loop per ``CHUNK_BATCH_S`` (a thread hop per chunk cost more
  CPU than the rest of the stream's work for that chunk).
* The caller's context variables are copied into the call (``activity.info()``,
  ``activity.is_cancelled()``); ``activity.heartbeat`` is sent from the worker's loop (by
  the engine's activity interceptor, ``heartbeats.SharedWorker``).
* Cancelling the caller (a cancelChat, a tool's timeout) cancels the call on its loop; the
  caller does not wait for it to wind down.

``TURNS_USER_LOOPS=0`` turns isolation off: user code runs on the worker's loop as before.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import functools
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from durable_turns.activities import loopwatch

T = TypeVar("T")
log = logging.getLogger("durable_turns.isolation")

USER_LOOPS = 32
"""The default size of the pool of user loops (``TURNS_USER_LOOPS``)."""
MAX_USER_LOOPS = 256
"""The largest pool a worker may ask for: each loop is a thread."""

_size = USER_LOOPS


def configure(loops: int) -> None:
    """Set the pool's size (0: user code runs on the worker's loop). Loops already started
    are kept; a smaller size only stops the pool growing."""
    global _size
    if not 0 <= loops <= MAX_USER_LOOPS:
        raise ValueError(f"TURNS_USER_LOOPS must be 0 (off) to {MAX_USER_LOOPS}, got {loops}")
    _size = loops


def enabled() -> bool:
    return _size > 0


def on_user_loop() -> bool:
    """Whether the running code is on a user loop (a call made there runs inline)."""
    return getattr(_here, "user", False)


_here = threading.local()


class UserLoop:
    """An event loop running forever on a daemon thread of its own."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.calls = 0
        """Calls assigned and not yet ended (changed under the pool's lock)."""
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(started,), name=f"turns-user-loop-{number}", daemon=True
        )
        self.thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        _here.user = True
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(loopwatch.watch, self.loop, self.number)
        self.loop.call_soon(started.set)
        self.loop.run_forever()


class _Pool:
    def __init__(self) -> None:
        self.loops: list[UserLoop] = []
        self.lock = threading.Lock()

    def acquire(self) -> UserLoop:
        """An idle loop, a new one while the pool may grow, else the least busy."""
        with self.lock:
            chosen = next((u for u in self.loops if u.calls == 0), None)
            if chosen is None and len(self.loops) < max(_size, 1):
                chosen = UserLoop(len(self.loops))
                self.loops.append(chosen)
            if chosen is None:
                chosen = min(self.loops, key=lambda u: u.calls)
            chosen.calls += 1
            return chosen

    def release(self, user: UserLoop) -> None:
        with self.lock:
            user.calls -= 1


_pool = _Pool()


def _sent_from(loop: asyncio.AbstractEventLoop, beat: Callable[..., None]) -> Callable[..., None]:
    """``beat`` made callable from any thread: it runs on ``loop``, in the caller's context."""
    context = contextvars.copy_context()

    def send(*details: Any) -> None:
        loop.call_soon_threadsafe(functools.partial(context.run, beat, *details))

    return send


def thread_safe_heartbeat(beat: Callable[..., None]) -> Callable[..., None]:
    """A heartbeat function for code off the worker's loop (called from the loop)."""
    return _sent_from(asyncio.get_running_loop(), beat)


def back_here(fn: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
    """``fn`` (a coroutine function of the worker's loop, e.g. publishing a streaming tool's
    value) made awaitable from a user loop: it runs on this loop (called from it)."""
    loop = asyncio.get_running_loop()

    async def on_worker_loop(value: Any) -> None:
        if asyncio.get_running_loop() is loop:
            await fn(value)
        else:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_awaited(fn, value), loop))

    return on_worker_loop


async def _awaited(fn: Callable[[Any], Awaitable[None]], value: Any) -> None:
    await fn(value)


def _submit(
    user: UserLoop, make: Callable[[], Awaitable[T]], label: str
) -> concurrent.futures.Future[T]:
    """Start ``make()`` on ``user``'s loop, in a copy of the caller's context."""
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    async def call() -> T:
        with loopwatch.running(label):
            return await make()

    def finished(task: asyncio.Task[T]) -> None:
        _pool.release(user)
        try:
            if task.cancelled():
                done.cancel()
            elif (error := task.exception()) is not None:
                done.set_exception(error)
            else:
                done.set_result(task.result())
        except concurrent.futures.InvalidStateError:
            pass  # the caller gave up on it first

    def start() -> None:  # on the user loop, in the copy of the caller's context
        if done.cancelled():
            _pool.release(user)
            return
        task = user.loop.create_task(call())
        task.add_done_callback(finished)
        done.add_done_callback(
            lambda f: f.cancelled() and user.loop.call_soon_threadsafe(task.cancel)
        )

    user.loop.call_soon_threadsafe(start)  # the handle copies the caller's context
    return done


async def run(label: str, make: Callable[[], Awaitable[T]]) -> T:
    """Await ``make()`` on a user loop of its own (on this loop when isolation is off).

    ``make`` is called on the user loop, so the coroutine is created there. ``label`` (e.g.
    ``tool get_weather``) is what the loop watchdog names if the call blocks its loop."""
    if not enabled() or on_user_loop():
        with loopwatch.running(label):
            return await make()
    return await asyncio.wrap_future(_submit(_pool.acquire(), make, label))


class Lease:
    """One user loop kept for a stage of a step (its transforms, its ``on_chunk`` calls)."""

    def __init__(self) -> None:
        on = enabled() and not on_user_loop()
        self.user: UserLoop | None = _pool.acquire() if on else None

    def close(self) -> None:
        if self.user is not None:
            _pool.release(self.user)
            self.user = None

    async def run(self, label: str, make: Callable[[], Awaitable[T]]) -> T:
        """Await ``make()`` on the leased loop (inline when isolation is off)."""
        if self.user is None:
            with loopwatch.running(label):
                return await make()
        with _pool.lock:
            self.user.calls += 1  # released by the call's end, like any call
        return await asyncio.wrap_future(_submit(self.user, make, label))

    async def call(self, label: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (a plain function) on the leased loop's thread, awaited."""
        if self.user is None:
            with loopwatch.running(label):
                return fn(*args)
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        context = contextvars.copy_context()
        user = self.user
        with _pool.lock:
            user.calls += 1  # until fn has returned, even if the caller gave up first

        def invoke() -> None:
            try:
                if not done.set_running_or_notify_cancel():
                    return
                try:
                    with loopwatch.running_here(label):
                        result = context.run(fn, *args)
                except BaseException as e:
                    done.set_exception(e)
                else:
                    done.set_result(result)
            finally:
                _pool.release(user)

        user.loop.call_soon_threadsafe(invoke)
        return await asyncio.wrap_future(done)


CHUNK_BATCH_S = 0.1
"""A step's ``on_chunk`` stage wakes its user loop at most once in this many seconds, and a
chunk waits at most this long for its wake-up: a live model streams a chunk every ~15 ms,
and waking a thread costs more CPU (~100 µs) than a hook that counts chunks."""
CHUNK_BATCH = 256
"""A stage wakes its user loop at once when this many chunks wait (a burst)."""


class ChunkStage:
    """``on_chunk`` for one step, run on a leased user loop in the order chunks came.

    ``push`` never waits: a chunk costs the model stream a deque append. The idle user loop
    is woken (one thread hop for every chunk waiting) by a push at least
    :data:`CHUNK_BATCH_S` after its last wake-up, else by a timer :data:`CHUNK_BATCH_S`
    after the push (or at once when :data:`CHUNK_BATCH` chunks wait): a stream pays one hop
    per ``CHUNK_BATCH_S`` at most, however fast it is, and a user loop still busy takes the
    chunks pushed meanwhile with no hop. ``drain`` hands over what waits at once and waits
    for every chunk pushed so far to be seen, so a step's ``on_chunk`` calls end before the
    step does."""

    def __init__(self, observe: Callable[[Any], Awaitable[None]], label: str) -> None:
        self.observe = observe
        self.label = label
        self.lease = Lease()
        self.pending: collections.deque[Any] = collections.deque()
        self.lock = threading.Lock()
        self.running = False
        """The user loop is taking chunks (set here, cleared there when none are left)."""
        self.idle: concurrent.futures.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None
        self.context = contextvars.copy_context()
        """The step's context, for ``on_chunk`` on the user loop (copied once here, not at
        every wake-up): its ``activity.info()``, and an ``activity.heartbeat`` the engine's
        activity interceptor sends from the worker's loop (``heartbeats.SharedWorker``)."""
        self.woken = -CHUNK_BATCH_S
        """When the user loop was last woken (the worker's loop's clock)."""
        self.timer: asyncio.TimerHandle | None = None
        """The wake-up scheduled for the chunks waiting (touched on the worker's loop only)."""

    async def push(self, chunk: Any) -> None:
        if self.lease.user is None:
            with loopwatch.running(self.label):
                await self.observe(chunk)
            return
        self.pending.append(chunk)
        loop = asyncio.get_running_loop()
        if loop.time() - self.woken >= CHUNK_BATCH_S or len(self.pending) >= CHUNK_BATCH:
            self._wake()
        elif self.timer is None:
            with self.lock:
                if self.running:
                    return
            self.timer = loop.call_later(CHUNK_BATCH_S, self._wake)

    def _wake(self) -> None:
        """On the worker's loop: hand the waiting chunks to the user loop, unless it runs."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        user = self.lease.user
        if user is None:
            return
        with self.lock:
            if self.running or not self.pending:
                return
            self.running = True
        self.woken = asyncio.get_running_loop().time()
        user.loop.call_soon_threadsafe(functools.partial(self.context.run, self._start, user))

    def _start(self, user: UserLoop) -> None:
        self.task = user.loop.create_task(self._work())

    async def _work(self) -> None:
        with loopwatch.running(self.label):
            while True:
                while self.pending:
                    try:
                        await self.observe(self.pending.popleft())
                    except Exception as e:  # observe logs its hook's errors; this is a bug
                        log.warning("%s raised %r (ignored)", self.label, e)
                with self.lock:
                    if not self.pending:
                        self.running = False
                        idle, self.idle = self.idle, None
                        break
            if idle is not None and not idle.done():
                idle.set_result(None)

    async def drain(self) -> None:
        """Wait until every chunk pushed so far has been observed."""
        if self.lease.user is None:
            return
        self._wake()
        with self.lock:
            if not self.running and not self.pending:
                return
            if self.idle is None:
                self.idle = concurrent.futures.Future()
            idle = self.idle
        await asyncio.wrap_future(idle)

    def close(self) -> None:
        """End the stage: chunks not yet observed (a step cancelled mid-stream) are dropped.
        The loop is handed back when the stage's last call has ended."""
        user = self.lease.user
        if user is None:
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.lease.user = None
        with self.lock:
            self.pending.clear()
            busy = self.running
        if not busy:
            _pool.release(user)
            return

        def stop() -> None:  # on the user loop, after the stage's task was created
            task = self.task
            if task is None or task.done():
                _pool.release(user)
                return
            task.add_done_callback(lambda _: _pool.release(user))
            task.cancel()

        user.loop.call_soon_threadsafe(stop)
