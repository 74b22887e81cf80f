"""Timeouts and retry policies of every activity, written in one place.

Each activity has an explicit start-to-close timeout, a heartbeat timeout (so a dead
worker's attempt moves to another worker quickly) and a retry policy.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

from durable_turns.contract import (
    HOOK_ERROR,
    INVALID_MODEL,
    INVALID_REQUEST,
    PROVIDER_ERROR,
    TurnPlan,
)

BEGIN_HEARTBEAT = timedelta(seconds=10)
"""begin_turn runs before the plan (and its heartbeat timeout) is known."""

SHORT = timedelta(minutes=2)

HOOK_ERRORS = [HOOK_ERROR, INVALID_MODEL, INVALID_REQUEST]

BOOKKEEPING_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=0,
    non_retryable_error_types=HOOK_ERRORS,
)
"""Store bookkeeping (open, begin, finish, fail, respond) retries until the store is back:
no attempt limit, so a conversation never fails, nor loses a request, to a brief outage.
Hook errors and invalid input are not retried."""


def model_retry(plan: TurnPlan) -> RetryPolicy:
    """Transient provider errors, stalls and crashes: ``max_retries`` more attempts."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=plan.max_retries + 1,
        non_retryable_error_types=[*HOOK_ERRORS, PROVIDER_ERROR],
    )


TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=3,
)
"""A tool's own exceptions become tool errors inside the activity; retries cover crashes."""


def heartbeat(plan: TurnPlan) -> timedelta:
    return timedelta(seconds=plan.heartbeat_timeout_s)
