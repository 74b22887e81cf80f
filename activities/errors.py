"""The typed failures activities raise (``ApplicationError`` with a ``type``).

The type names live in ``durable_turns.contract``, beside the workflow's retry policies
that name them; this module builds the errors.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ApplicationError

from durable_turns.contract import (  # noqa: F401 - re-exported for the activities
    HOOK_ERROR,
    INVALID_MODEL,
    INVALID_REQUEST,
    PROVIDER_ERROR,
    PROVIDER_TRANSIENT,
    STREAM_STALLED,
    WORKER_SHUTDOWN,
)
from durable_turns.models.base import ProviderError


def provider_failure(error: ProviderError) -> ApplicationError:
    """A provider error as Temporal sees it: retryable (with retry-after) or final."""
    details = {"kind": error.kind, "status": error.status, "provider": error.provider}
    if error.retryable:
        return ApplicationError(
            str(error),
            details,
            type=PROVIDER_TRANSIENT,
            next_retry_delay=_delay(error.retry_after),
        )
    return ApplicationError(str(error), details, type=PROVIDER_ERROR, non_retryable=True)


def hook_failure(hook: str, error: BaseException) -> ApplicationError:
    return ApplicationError(
        f"hook {hook} raised {type(error).__name__}: {error}",
        type=HOOK_ERROR,
        non_retryable=True,
    )


def _delay(seconds: float | None) -> timedelta | None:
    return timedelta(seconds=seconds) if seconds else None
