"""Error types that cross the activity boundary (``ApplicationError.type``).

The workflow reads ``err.cause.type`` to decide what to do; these names are persisted in
history, so keep them stable.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ApplicationError

from activities.models.base import ProviderError

PROVIDER_TRANSIENT = "ProviderTransientError"
PROVIDER_ERROR = "ProviderError"
STREAM_STALLED = "StreamStalled"
HOOK_ERROR = "HookError"
INVALID_REQUEST = "InvalidRequest"
INVALID_MODEL = "InvalidModel"


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
