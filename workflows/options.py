"""Timeouts and retry policies of every activity, written in one place.

Each activity has an explicit start-to-close timeout, a heartbeat timeout (so a dead
worker's attempt moves to another worker quickly) and a retry policy.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import timedelta
from fractions import Fraction
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from durable_turns.contract import (
    CHAT_RESPONSE,
    HANDED_OVER_KEY,
    HANDOVER_PATCH,
    HOOK_ERROR,
    INVALID_MODEL,
    INVALID_REQUEST,
    LIVENESS_PATCH,
    LOST_AT_ONCE_KEY,
    PROVIDER_ERROR,
    SHARE_KEY,
    STORE_UNAVAILABLE,
    WORKER_CRASH_LOOP,
    WORKER_LOST,
    WORKER_SHUTDOWN,
    ChatResponseInput,
    TurnPlan,
    TurnResult,
)

T = TypeVar("T")

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


TOOL_TRIES = 3
"""Attempts of a tool call, worker deaths not counted (``@tool(retries=…)`` is capped by it)."""


def heartbeat(plan: TurnPlan) -> timedelta:
    return timedelta(seconds=plan.heartbeat_timeout_s)


ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
"""An activity whose attempts the workflow schedules itself (``with_budgets``)."""

MODEL_FINAL = [*HOOK_ERRORS, PROVIDER_ERROR]
"""Failures of a model step (or compaction) that are not retried."""

CHAT_RESPONSE_CRASH_RETRIES = 5
"""``on_chat_response`` is run again after this many worker deaths (``TURNS_CRASH_RETRIES``'s
default: the conversation has no plan to read it from); its other failures without limit."""

INFRA_TYPES = (WORKER_SHUTDOWN, STORE_UNAVAILABLE)
"""Failures an activity raises that are its infrastructure's, not the turn's: counted with
worker deaths, never against the model's or a tool's own retries."""

SHARED_CAP = 4
"""A death of a worker that ran K turns costs each of them 1/min(K, SHARED_CAP) of a death:
a turn that crashes a busy worker every time is still stopped, after at most SHARED_CAP ×
``TURNS_CRASH_RETRIES`` + 1 deaths (21 at the defaults)."""

INFRA_RETRIES = 50
"""The infrastructure budget: how many attempts of one activity may be lost to anything
but its own failures (worker deaths of every kind, shutdowns past their grace, store
outages longer than an attempt), at least; past it, ``WorkerCrashLoop``. Large, for a deploy
storm or a flapping network fails no turn, yet bounded (``infra_budget``)."""


def is_death(err: ActivityError) -> bool:
    """Whether an attempt ended because its worker went away: no heartbeat in time (killed,
    out of memory, a native crash, a frozen event loop), or no liveness beat in time
    (``is_lost``), a shutdown past its grace, or a store outage longer than the attempt
    could wait."""
    cause = err.cause
    if isinstance(cause, TimeoutError):
        return cause.type == TimeoutType.HEARTBEAT
    return isinstance(cause, ApplicationError) and (cause.type in INFRA_TYPES or is_lost(err))


def is_lost(err: ActivityError) -> bool:
    """Whether another worker failed the attempt because its worker stopped beating
    (``WorkerLost``, ``streams.liveness``): counted as a heartbeat timeout, under the
    ``liveness`` patch (a run from before it counted the failure as the step's own)."""
    cause = err.cause
    return (
        isinstance(cause, ApplicationError)
        and cause.type == WORKER_LOST
        and workflow.patched(LIVENESS_PATCH)
    )


def _detail(err: ActivityError, key: str) -> bool:
    """Whether the failure's details hold ``{key: True}``."""
    cause = err.cause
    return isinstance(cause, ApplicationError) and any(
        isinstance(d, dict) and d.get(key) is True for d in cause.details
    )


def is_handed_over(err: ActivityError) -> bool:
    """Whether the attempt's worker, shutting down, handed it over at once (a ``WorkerShutdown``
    with ``HANDED_OVER_KEY`` in its details: ``streams.liveness``'s ``hand_over``)."""
    cause = err.cause
    return (
        isinstance(cause, ApplicationError)
        and cause.type == WORKER_SHUTDOWN
        and _detail(err, HANDED_OVER_KEY)
    )


def is_final(err: ActivityError, final_types: Collection[str]) -> bool:
    """Whether a failure is not retried at all: a cancel, a non-retryable error."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return cause.non_retryable or (cause.type or "") in final_types
    return not isinstance(cause, TimeoutError)


def backoff(n: int, most: float) -> timedelta:
    """The wait before the next attempt after ``n`` failures (or deaths): 1 s, doubling."""
    return timedelta(seconds=min(2.0 ** (n - 1), most))


Death = tuple[str | None, int]
"""A heartbeat timeout as its last heartbeat told it: the worker process (None: not told, a
worker of an earlier release or an attempt that never heartbeat) and its turns."""


def death_of(err: ActivityError) -> Death:
    """Which worker a heartbeat timeout was, and how many turns it ran (``heartbeats.share``,
    the last detail of the attempt's last heartbeat)."""
    cause = err.cause
    details: Sequence[Any] = ()
    if isinstance(cause, TimeoutError):
        details = cause.last_heartbeat_details
    elif isinstance(cause, ApplicationError):  # WorkerLost: the dead worker's share
        details = cause.details
    for detail in reversed(details):
        if isinstance(detail, dict) and isinstance(detail.get(SHARE_KEY), str):
            turns = detail.get("turns")
            return detail[SHARE_KEY], turns if isinstance(turns, int) and turns > 0 else 1
    return None, 1


def crash_cost(deaths: Sequence[Death]) -> Fraction:
    """What a run of heartbeat timeouts costs the crash budget, which is for the deaths a
    turn may have caused itself. A death of a worker that ran K turns costs 1/min(K,
    ``SHARED_CAP``) (a SIGKILL of a busy worker, an out-of-memory kill, is shared by all it
    ran); one whose worker heartbeats again in a later attempt costs nothing (it did not die:
    its heartbeats did not get through, a network partition, a frozen event loop that came
    back; the infrastructure budget bounds those). A worker that ran this turn alone and
    never came back costs 1: a turn that kills its worker every time is stopped after
    ``TURNS_CRASH_RETRIES`` + 1 runs, as before. Exact (fractions) and read from the
    history only, so replay decides the same."""
    cost = Fraction(0)
    for i, (worker, turns) in enumerate(deaths):
        if worker is not None and any(later == worker for later, _ in deaths[i + 1 :]):
            continue
        cost += Fraction(1, min(turns, SHARED_CAP))
    return cost


DEATH_WAIT_MOST_S = 10.0
"""The longest wait before an attempt after a loss (its heartbeat timeout was waited already)."""


def death_wait(deaths: int, timeouts: Sequence[Death]) -> timedelta:
    """The wait before the next attempt after ``deaths`` losses, ``timeouts`` the heartbeat
    timeouts among them: 1 s, doubling with what the losses weigh, not with their number. A
    heartbeat timeout weighs what it costs the crash budget (``crash_cost``: a fraction when
    the worker ran other turns too, nothing when it came back); any other loss (a shutdown
    past its grace, a store outage) weighs one, so an outage is still backed off from. A
    turn on busy workers killed again and again (a deploy storm, an out-of-memory killer)
    thus retries about a second after each heartbeat timeout rather than waiting 1, 2, 4, 8,
    10 s for nothing of its own doing. Only the timer's duration depends on it: a replay
    decides alike (a duration is not part of what a replay checks)."""
    weighed = crash_cost(timeouts) + (deaths - len(timeouts))
    return backoff(max(1, math.ceil(weighed)), DEATH_WAIT_MOST_S)


def lost_wait(deaths: int, timeouts: Sequence[Death]) -> timedelta | None:
    """The wait before the next attempt after a loss that liveness detected (``is_lost``): none
    while the losses weigh one death at most (the detection, ``TURNS_LIVENESS_MS`` of silence,
    was the wait: another worker beats, or it could not have told), then ``death_wait``'s."""
    wait = death_wait(deaths, timeouts)
    return None if wait <= backoff(1, DEATH_WAIT_MOST_S) else wait


def infra_budget(crash_retries: int) -> int:
    """The infrastructure budget of an activity whose crash budget is ``crash_retries``: at
    least ``INFRA_RETRIES``, and never below what a turn crashing a busy worker may spend."""
    return max(INFRA_RETRIES, SHARED_CAP * (crash_retries + 1))


async def with_budgets(
    run: Callable[[int, int, bool], Awaitable[T]],
    *,
    stage: str,
    kind: str,
    tries: int,
    crash_retries: int,
    final_types: Collection[str] = (),
    most_wait_s: float = 30.0,
    on_retry: Callable[[ActivityError], None] | None = None,
) -> T:
    """Run an activity whose every schedule is one attempt (``ONE_ATTEMPT``), counting three
    budgets apart: its own failures (a provider's error, a stall, a tool's retry), at most
    ``tries`` attempts (0: no limit); the deaths it may have caused itself (heartbeat
    timeouts weighed by ``crash_cost``), at most ``crash_retries``; and every attempt lost to
    its infrastructure (``is_death``: deaths, shutdowns past their grace, store outages), at
    most ``infra_budget``. ``run(attempt, failures, last_try)`` schedules one attempt.

    The last failure is raised as it came; past either death budget, a non-retryable
    ``WorkerCrashLoop`` naming ``stage`` (``kind``, the Think stage, is its first detail).
    Each retry waits with backoff on a durable timer (1 s doubling, at most ``most_wait_s``
    after failures; after losses, whose heartbeat timeout has been waited already, doubling
    with what they weigh, at most 10 s: ``death_wait``; after a hand-over, none: its worker
    left on purpose and another one is there, under patch ``handover``; after a loss liveness
    detected, none while the losses weigh one death at most, when the failure says so
    (``LOST_AT_ONCE_KEY``): ``lost_wait``): a few events per
    retry in the history, none when the first attempt succeeds. ``on_retry``
    sees each failure that is retried, before the wait (``recovery.Tracker.note``)."""
    deaths = failures = handovers = 0
    timeouts: list[Death] = []
    wait: timedelta | None
    attempt = 1
    while True:
        try:
            return await run(attempt, failures, tries > 0 and failures + 1 >= tries)
        except ActivityError as err:
            if is_final(err, final_types):
                raise
            if is_death(err):
                deaths += 1
                if isinstance(err.cause, TimeoutError) or is_lost(err):
                    timeouts.append(death_of(err))
                if crash_cost(timeouts) > crash_retries:
                    raise _crash_loop(stage, kind, err, timeouts, crash_retries) from err
                if deaths > infra_budget(crash_retries):
                    raise ApplicationError(
                        f"{stage}: {deaths} of its attempts were lost to its infrastructure"
                        f" (last: {_cause(err)}); it is not run again (at most"
                        f" {infra_budget(crash_retries)})",
                        kind,
                        stage,
                        type=WORKER_CRASH_LOOP,
                        non_retryable=True,
                    ) from err
                wait, why = death_wait(deaths - handovers, timeouts), f"worker died ({deaths})"
                if is_handed_over(err) and workflow.patched(HANDOVER_PATCH):
                    handovers += 1  # weighs nothing: no wait, none added to later ones
                    wait = None
                elif is_lost(err) and _detail(err, LOST_AT_ONCE_KEY):
                    wait = lost_wait(deaths - handovers, timeouts)
            else:
                failures += 1
                if tries > 0 and failures >= tries:
                    raise
                wait, why = backoff(failures, most_wait_s), f"failed ({failures})"
                cause = err.cause
                if isinstance(cause, ApplicationError) and cause.next_retry_delay:
                    wait = cause.next_retry_delay  # the provider's retry-after
            if on_retry is not None:
                on_retry(err)
            attempt += 1
            if wait is not None:
                await workflow.sleep(wait, summary=f"retry {stage}: {why}")


def _crash_loop(
    stage: str,
    kind: str,
    err: ActivityError,
    timeouts: Sequence[Death],
    crash_retries: int,
) -> ApplicationError:
    deaths, counted = len(timeouts), crash_cost(timeouts)
    weighed = (
        ""
        if counted == deaths
        else f", counted as {float(counted):.2f}: shared with other turns or outlived"
    )
    return ApplicationError(
        f"{stage}: the worker running it died {deaths} times (last: {_cause(err)}{weighed});"
        f" it is not run again (TURNS_CRASH_RETRIES={crash_retries}): something in the turn"
        " may crash the worker",
        kind,
        stage,
        type=WORKER_CRASH_LOOP,
        non_retryable=True,
    )


def _cause(err: ActivityError) -> str:
    cause = err.cause
    if isinstance(cause, TimeoutError):
        return "no heartbeat within the heartbeat timeout"
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(err)


async def chat_response(result: TurnResult, summary: str, agent: str | None = None) -> None:
    """Run ``chat_response`` (``on_chat_response``). Its failures are retried without limit
    (a store outage; the hook's own errors are logged, never raised), its worker's deaths
    ``CHAT_RESPONSE_CRASH_RETRIES`` times: then it is given up, with a warning in the
    workflow's log, and the turn's result stands. ``agent``: a sub-agent's turn, whose
    agent's hook runs."""

    def attempt(policy: RetryPolicy) -> Awaitable[None]:
        return workflow.execute_activity(
            CHAT_RESPONSE,
            ChatResponseInput(result=result, agent=agent),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=BEGIN_HEARTBEAT,
            retry_policy=policy,
            summary=summary,
        )

    try:
        await with_budgets(
            lambda _n, _failed, _last: attempt(ONE_ATTEMPT),
            stage=f"on_chat_response of turn {result.turn_number}",
            kind="persist",
            tries=0,
            crash_retries=CHAT_RESPONSE_CRASH_RETRIES,
            final_types=HOOK_ERRORS,
            most_wait_s=10.0,
        )
    except ApplicationError as e:
        if e.type != WORKER_CRASH_LOOP:
            raise
        workflow.logger.warning("%s (%s)", e.message, WORKER_CRASH_LOOP)
