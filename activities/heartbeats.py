"""Heartbeats: keeping an activity visibly alive, and telling a user's cancel from others.

An activity that stops heartbeating is failed after its heartbeat timeout, and a cancel
reaches an activity only in the answer to a heartbeat; these helpers are how activities
and the worker's options handle both.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio import activity

from durable_turns.config import Settings


def worker_options(settings: Settings) -> dict[str, Any]:
    """The Worker options activities rely on.

    On SIGTERM, running activities get ``shutdown_grace_s`` to finish before they are handed
    over (cancelled, then re-run in full elsewhere). A cancel reaches an activity only in the
    answer to a heartbeat, and the SDK sends at most one heartbeat per 0.8 × the heartbeat
    timeout (24 s at the default 30 s): ``cancel_check_ms`` caps that interval, so a model
    step, which heartbeats twice as often while it streams, stops within about that long.
    Activities that heartbeat rarely (hooks, tools: every timeout/4) send no more than before.
    """
    options: dict[str, Any] = {
        "graceful_shutdown_timeout": timedelta(seconds=settings.shutdown_grace_s)
    }
    if settings.cancel_check_ms > 0:
        options["max_heartbeat_throttle_interval"] = timedelta(
            milliseconds=settings.cancel_check_ms
        )
    return options


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


def cancelled_by_user() -> bool:
    """Whether the running activity's cancellation was asked for by its workflow (cancelChat),
    rather than caused by a worker shutdown, a heartbeat timeout or a lost server."""
    details = activity.cancellation_details()
    return bool(
        details is not None
        and details.cancel_requested
        and not (details.worker_shutdown or details.timed_out or details.not_found)
        and not (details.paused or details.reset)
    )


@contextlib.asynccontextmanager
async def keep_alive(every_s: float) -> AsyncIterator[None]:
    """Heartbeat on a timer while a hook or tool runs: the worker is alive, not stuck.

    A local activity (begin/finish/fail turn) has no heartbeat of its own: the SDK keeps its
    workflow task alive instead, so there is nothing to do."""
    if activity.info().is_local:
        yield
        return

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(every_s)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
