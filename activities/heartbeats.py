"""Heartbeats: keeping an activity visibly alive, and telling a user's cancel from others.

An activity that stops heartbeating is failed after its heartbeat timeout, and a cancel
reaches an activity only in the answer to a heartbeat; these helpers are how activities
and the worker's options handle both.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from durable_turns.config import Settings
from durable_turns.contract import SHARE_KEY
from durable_turns.streams.cancel import CancelWatch


def worker_options(settings: Settings) -> dict[str, Any]:
    """The Worker options activities rely on (their interceptor, :class:`SharedWorker`, comes
    with the plugin, ``durable_turns.DurableTurnsPlugin``).

    On SIGTERM, running activities get ``shutdown_grace_s`` to finish before they are handed
    over (cancelled, then re-run in full elsewhere). A cancel reaches an activity only in the
    answer to a heartbeat, and the SDK sends at most one heartbeat per 0.8 × the heartbeat
    timeout (24 s at the default 30 s): ``cancel_check_ms`` caps that interval, so a model
    step that cannot watch a cancel mark (``streams.cancel``), which then heartbeats twice as
    often while it streams, stops within about that long. Activities that heartbeat rarely
    (hooks, tools, a conversation's model step: every timeout/4) send no more than before.
    """
    options: dict[str, Any] = {
        "graceful_shutdown_timeout": timedelta(seconds=settings.shutdown_grace_s),
    }
    if settings.cancel_check_ms > 0:
        options["max_heartbeat_throttle_interval"] = timedelta(
            milliseconds=settings.cancel_check_ms
        )
    return options


WORKER_PROCESS = uuid.uuid4().hex[:16]
"""This worker process, as its heartbeats name it: a new one for every start (a restarted
container keeps its host name and pid, so Temporal's identity cannot tell them apart)."""

_RUNNING: Counter[str] = Counter()
"""The workflows (turns, sub-agent turns, conversations) with an activity running here."""


def share() -> dict[str, Any]:
    """What a heartbeat says of its worker: which process, and how many distinct turns have
    an activity running on it (and, added per activity, ``"beats"``: how many heartbeats it
    has sent, which a ``describe`` of its workflow shows). When the heartbeats stop, the workflow reads the last one
    (``TimeoutError.last_heartbeat_details``) to weigh the death: a death shared with other
    turns, or of a worker that heartbeats again later, is not the turn's own
    (``workflows.options.crash_cost``)."""
    return {SHARE_KEY: WORKER_PROCESS, "turns": max(len(_RUNNING), 1)}


class SharedWorker(Interceptor):
    """Counts the turns with an activity running on this worker, adds ``share()`` to every
    heartbeat of its activities (as the last detail), and sends a heartbeat made on another
    thread (user code on a user loop, ``activities.isolation``) from the worker's loop."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _CountingInbound(next)


class _CountingInbound(ActivityInboundInterceptor):
    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        super().init(_SharingOutbound(outbound, asyncio.get_running_loop()))

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        key = activity.info().workflow_id or ""
        _RUNNING[key] += 1
        try:
            return await super().execute_activity(input)
        finally:
            _RUNNING[key] -= 1
            if _RUNNING[key] <= 0:
                del _RUNNING[key]


class _SharingOutbound(ActivityOutboundInterceptor):
    """An activity's ``activity.heartbeat``: the SDK sends a heartbeat with a task of the
    worker's loop, so one made on another thread (a hook or tool on its user loop, whose
    context is a copy of the activity's) goes there first, as the SDK does for a sync
    activity's; ``share()`` is read there too."""

    def __init__(self, next: ActivityOutboundInterceptor, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(next)
        self.loop = loop
        """The worker's loop, where the activity started."""
        self.beats = 0
        """This activity's heartbeats so far (each detail says how many: ``"beats"``)."""

    def heartbeat(self, *details: Any) -> None:
        if _running_loop() is not self.loop:
            try:
                self.loop.call_soon_threadsafe(functools.partial(self.heartbeat, *details))
            except RuntimeError:  # the worker's loop is closed: the activity is long over
                pass
            return
        self.beats += 1
        super().heartbeat(*details, {**share(), "beats": self.beats})


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # a thread with no loop running
        return None


_ATTEMPT: contextvars.ContextVar[tuple[int, int]] = contextvars.ContextVar(
    "durable_turns_attempt", default=(0, 0)
)


def count_attempt(attempt: int, failures: int) -> None:
    """This activity's attempt as its workflow counts it (``ModelStepInput.attempt``,
    ``ToolCallInput.attempt``; 0: Temporal's own count). The workflow schedules each attempt
    itself, so it can count a worker's death apart from a failure; Temporal's count is then
    always 1. Scoped to the activity's own task."""
    _ATTEMPT.set((attempt, failures))


def attempt() -> int:
    """The running activity's attempt number (1, 2, …), worker deaths included."""
    counted, _ = _ATTEMPT.get()
    if counted:
        return counted
    return activity.info().attempt if activity.in_activity() else 1


def failures(attempt_number: int) -> int:
    """How many earlier attempts of the running activity failed, worker deaths not counted
    (without the workflow's count: every earlier attempt of ``attempt_number``)."""
    counted, failed = _ATTEMPT.get()
    return failed if counted else attempt_number - 1


_MARK: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "durable_turns_cancel_mark", default=None
)
"""The running model step's cancel-mark state: None when it watches no mark, else ``[found]``."""


@contextlib.contextmanager
def stop_on_mark(watch: CancelWatch | None, key: str) -> Iterator[None]:
    """While the block runs, the request's cancel mark (``streams.cancel``) cancels the
    running activity's task as Temporal's cancellation would; :func:`cancelled_by_user` is
    then true. Without a watch (no chunk stream), nothing: the step relies on heartbeats."""
    if watch is None:
        yield
        return
    task = asyncio.current_task()
    assert task is not None
    state = [False]

    def found() -> None:
        state[0] = True
        task.cancel()

    token = _MARK.set(state)
    try:
        with watch.watch(key, found):
            yield
    finally:
        _MARK.reset(token)


def watched() -> bool:
    """Whether the running step watches a cancel mark: then its heartbeats are for liveness
    only (a few per heartbeat timeout), not how a cancelChat reaches it."""
    return _MARK.get() is not None


def stopped_by_mark() -> bool:
    """Whether the running step's cancel mark was found (the step is being cancelled)."""
    state = _MARK.get()
    return bool(state and state[0])


def cancelled_by_user() -> bool:
    """Whether the running activity's cancellation was asked for by its workflow (cancelChat),
    or by its cancel mark, rather than caused by a worker shutdown, a heartbeat timeout or a
    lost server."""
    if stopped_by_mark():
        return True
    details = activity.cancellation_details()
    return bool(
        details is not None
        and details.cancel_requested
        and not (details.worker_shutdown or details.timed_out or details.not_found)
        and not (details.paused or details.reset)
    )


@contextlib.asynccontextmanager
async def keep_alive(every_s: float, *, at_once: bool = True) -> AsyncIterator[None]:
    """Heartbeat on a timer while a hook or tool runs: the worker is alive, not stuck.
    ``at_once=False`` sends the first only after ``every_s``: a call that is usually quick
    (a store call) costs no heartbeat unless it lasts.

    A local activity (begin/finish/fail turn) has no heartbeat of its own: the SDK keeps its
    workflow task alive instead, so there is nothing to do."""
    if activity.info().is_local:
        yield
        return

    async def beat() -> None:
        if not at_once:
            await asyncio.sleep(every_s)
        while True:
            activity.heartbeat()
            await asyncio.sleep(every_s)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
