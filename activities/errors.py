"""The typed failures activities raise (``ApplicationError`` with a ``type``).

The type names live in ``durable_turns.contract``, beside the workflow's retry policies
that name them; this module builds the errors.

Errors the user must fix (a missing API key, an unknown provider or model, a bad request) and
a provider's own failures are no fault of the engine: they are raised ``expected``
(temporalio's ``BENIGN`` category, which it logs at DEBUG only) and :class:`ExpectedErrors`
logs each as one line with its type. Every other failure keeps the SDK's warning with its
traceback: a fault of the engine, or of the user's own code (a hook or tool that raised).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from durable_turns.contract import (  # noqa: F401 - re-exported for the activities
    CHUNK_STREAM_UNAVAILABLE,
    HOOK_ERROR,
    INVALID_MODEL,
    INVALID_REQUEST,
    PROVIDER_ERROR,
    PROVIDER_TRANSIENT,
    STORE_UNAVAILABLE,
    STREAM_STALLED,
    TURN_TAKEN_OVER,
    WORKER_CRASH_LOOP,
    WORKER_SHUTDOWN,
)
from durable_turns.models.base import ProviderError

log = logging.getLogger("durable_turns.activities")

EXPECTED = ApplicationErrorCategory.BENIGN
"""The category of a failure the user must fix, or a provider's: one log line, no
traceback (``category=EXPECTED``)."""


def provider_failure(error: ProviderError) -> ApplicationError:
    """A provider error as Temporal sees it: retryable (with retry-after) or final."""
    details = {"kind": error.kind, "status": error.status, "provider": error.provider}
    if error.retryable:
        return ApplicationError(
            str(error),
            details,
            type=PROVIDER_TRANSIENT,
            next_retry_delay=_delay(error.retry_after),
            category=EXPECTED,
        )
    return ApplicationError(
        str(error), details, type=PROVIDER_ERROR, non_retryable=True, category=EXPECTED
    )


def hook_failure(hook: str, error: BaseException) -> ApplicationError:
    return ApplicationError(
        f"hook {hook} raised {type(error).__name__}: {error}",
        type=HOOK_ERROR,
        non_retryable=True,
    )


def _delay(seconds: float | None) -> timedelta | None:
    return timedelta(seconds=seconds) if seconds else None


def taken_over(turn_id: str, detail: str = "") -> ApplicationError:
    """This run may not write into the turn: another workflow run owns it."""
    return ApplicationError(
        f"turn {turn_id} belongs to another workflow run; this one may not write into it"
        + (f" ({detail})" if detail else ""),
        type=TURN_TAKEN_OVER,
        non_retryable=True,
    )


def crash_loop(stage: str, deaths: int, budget: int) -> ApplicationError:
    """A local activity found its own attempts dead once more than ``TURNS_CRASH_RETRIES``
    allows (non-retryable; the workflow's own count does the same for regular ones)."""
    return ApplicationError(
        f"{stage}: the worker running it died {deaths} times (last: its workflow task timed"
        f" out); it is not run again (TURNS_CRASH_RETRIES={budget}): something in the turn"
        " may crash the worker",
        type=WORKER_CRASH_LOOP,
        non_retryable=True,
    )


def store_unavailable(error: BaseException, waited_s: float) -> ApplicationError:
    """The store stayed unreachable for as long as this attempt could wait (retryable)."""
    return ApplicationError(
        f"the transcript store is unavailable (waited {waited_s:.0f}s): {error}",
        type=STORE_UNAVAILABLE,
    )


class ExpectedErrors(Interceptor):
    """Logs each ``EXPECTED`` failure of an activity as one warning line: the activity, its
    workflow and attempt, the error's type and message (the SDK logs it at DEBUG only)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ExpectedInbound(next)


class _ExpectedInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await super().execute_activity(input)
        except ApplicationError as e:
            if e.category == EXPECTED:
                info = activity.info()
                log.warning(
                    "%s of %s failed (attempt %d%s): %s: %s",
                    info.activity_type,
                    info.workflow_id,
                    info.attempt,
                    "" if e.non_retryable else ", retried",
                    e.type,
                    e.message,
                )
            raise
