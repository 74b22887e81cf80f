"""Recovery, as the workflow sees it: which retries of an activity are recoveries.

The workflow schedules every attempt of a model step, a compaction and a tool call itself
(``options.with_budgets``), so it sees how each attempt ended. An attempt that was *lost*
(its worker died, shut down past its grace or lost the store: ``options.is_death``; or its
model stream stalled) makes the next attempt a recovery: that attempt's input carries a
``contract.Recovery``, so the activity tells the live stream (a ``recovering`` event) and
asks ``on_chat_recovery`` whether to go on, with no activity of its own and nothing to ask
again on replay (the answer is the attempt's result, in history). An attempt that failed
on its own (a provider's error, a tool's) is a retry, not a recovery.

Deterministic: it reads only the failures the history holds.
"""

from __future__ import annotations

from collections.abc import Iterable

from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from durable_turns.contract import (
    STORE_UNAVAILABLE,
    STREAM_STALLED,
    WORKER_LOST,
    WORKER_SHUTDOWN,
    Recovery,
    RecoveryReason,
    ToolOutcome,
)
from durable_turns.errors import Stopped

MAX_MESSAGE_CHARS = 500
"""A lost attempt's failure, as much of it as a recovery carries."""


def lost(err: ActivityError) -> RecoveryReason | None:
    """Why an attempt was lost, or None when it failed on its own (or was cancelled)."""
    cause = err.cause
    if isinstance(cause, TimeoutError):
        return "worker_lost" if cause.type == TimeoutType.HEARTBEAT else None
    if isinstance(cause, ApplicationError):
        return _LOST.get(cause.type or "")
    return None


_LOST: dict[str, RecoveryReason] = {
    WORKER_LOST: "worker_lost",
    WORKER_SHUTDOWN: "worker_shutdown",
    STORE_UNAVAILABLE: "store_unavailable",
    STREAM_STALLED: "stalled",
}


class Tracker:
    """The recovery the next attempt of one activity carries (``with_budgets``' ``on_retry``
    notes each failed attempt; ``last`` is what the next attempt's input gets)."""

    def __init__(self) -> None:
        self.last: Recovery | None = None
        self.deaths = 0

    def note(self, err: ActivityError) -> None:
        reason = lost(err)
        if reason in ("worker_lost", "worker_shutdown", "store_unavailable"):
            self.deaths += 1
        if reason is None:
            self.last = None
            return
        cause = err.cause
        message = str(cause) if cause is not None else str(err)
        if isinstance(cause, TimeoutError):
            message = "no heartbeat within the heartbeat timeout: the worker is gone"
        self.last = Recovery(reason=reason, message=message[:MAX_MESSAGE_CHARS], deaths=self.deaths)


def raise_if_stopped(outcomes: Iterable[ToolOutcome]) -> None:
    """``Stopped`` when ``on_chat_recovery`` stopped one of a step's tool calls (its
    siblings ran: their results are kept)."""
    if any(o.stopped for o in outcomes):
        raise Stopped
