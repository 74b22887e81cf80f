"""The death budgets (issue 25, items 6 and 7): a worker's death costs a turn's crash budget
(``TURNS_CRASH_RETRIES``) only as far as the turn may have caused it. A death shared with
other turns on the worker costs 1/K of a death (K capped), a worker that heartbeats again
later did not die (its heartbeats did not get through), and a shutdown past its grace or a
store outage spends only the infrastructure budget, which is larger and bounded too. A turn
that kills its worker every time is still stopped, alone or on a busy worker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from fractions import Fraction

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.converter import DataConverter
from temporalio.exceptions import ActivityError, RetryState, TimeoutError, TimeoutType

from durable_turns.activities.heartbeats import WORKER_PROCESS, share
from durable_turns.contract import MODEL_STEP, SHARE_KEY
from durable_turns.workflows.options import (
    INFRA_RETRIES,
    SHARED_CAP,
    crash_cost,
    death_of,
    death_wait,
    infra_budget,
    lost_wait,
)
from testkit.faultproxy import FaultProxy
from tests.support.harness import Harness
from tests.support.probes import wait_until

CRASH_RETRIES = 5


def _timed_out(*details: object) -> ActivityError:
    err = ActivityError(
        "activity timed out",
        scheduled_event_id=1,
        started_event_id=2,
        identity="w",
        activity_type=MODEL_STEP,
        activity_id="1",
        retry_state=RetryState.MAXIMUM_ATTEMPTS_REACHED,
    )
    err.__cause__ = TimeoutError(
        "heartbeat", type=TimeoutType.HEARTBEAT, last_heartbeat_details=details
    )
    return err


def _deaths_until_stopped(deaths: list[tuple[str | None, int]]) -> int:
    """How many of ``deaths`` a step takes before its crash budget stops it (0: never)."""
    for n in range(1, len(deaths) + 1):
        if crash_cost(deaths[:n]) > CRASH_RETRIES:
            return n
    return 0


def test_a_worker_that_died_running_the_turn_alone_costs_a_whole_death() -> None:
    alone = [(f"worker-{i}", 1) for i in range(20)]
    assert _deaths_until_stopped(alone) == CRASH_RETRIES + 1  # as before: 6 runs
    old = [(None, 1)] * 20  # histories of workers that did not say
    assert _deaths_until_stopped(old) == CRASH_RETRIES + 1


def test_a_death_shared_with_other_turns_costs_less() -> None:
    assert crash_cost([("a", 2)]) == Fraction(1, 2)
    assert crash_cost([("a", 3), ("b", 1)]) == Fraction(4, 3)
    assert crash_cost([("a", 40)]) == Fraction(1, SHARED_CAP)  # capped
    storm = [(f"worker-{i}", 8) for i in range(20)]  # SIGKILLs of busy workers
    assert _deaths_until_stopped(storm) == 0


def test_a_poison_turn_on_a_busy_worker_is_still_stopped() -> None:
    busy = [(f"worker-{i}", 30) for i in range(200)]
    assert _deaths_until_stopped(busy) == SHARED_CAP * CRASH_RETRIES + 1  # 21 runs
    assert infra_budget(CRASH_RETRIES) == INFRA_RETRIES >= SHARED_CAP * (CRASH_RETRIES + 1)
    assert infra_budget(50) == SHARED_CAP * 51  # never below what the crash budget allows


def test_a_worker_that_heartbeats_again_did_not_die() -> None:
    partitioned = [("a", 1), ("a", 1), ("a", 1), ("b", 1)]
    assert crash_cost(partitioned) == 2  # the last "a" and "b": nothing says they lived on
    assert _deaths_until_stopped([("a", 1)] * 100) == 0  # the infrastructure budget bounds it


def test_the_last_heartbeat_says_which_worker_and_how_many_turns() -> None:
    assert share() == {SHARE_KEY: WORKER_PROCESS, "turns": 1}
    assert death_of(_timed_out(12, {SHARE_KEY: "abc", "turns": 3})) == ("abc", 3)
    assert death_of(_timed_out("waiting for the store", {SHARE_KEY: "abc", "turns": 0})) == (
        "abc",
        1,
    )
    assert death_of(_timed_out(12)) == (None, 1)  # a worker of an earlier release
    assert death_of(_timed_out()) == (None, 1)  # never heartbeat


async def test_the_share_survives_the_round_trip_through_a_payload() -> None:
    """What the worker sends is what the workflow reads: the details go through the
    default converter both ways."""
    converter = DataConverter.default
    payloads = await converter.encode([7, share()])
    decoded = await converter.decode(payloads)
    assert death_of(_timed_out(*decoded)) == (WORKER_PROCESS, 1)


@pytest.fixture
def temporal_proxy(harness: Harness) -> Iterator[FaultProxy]:
    host, port = harness.address.rsplit(":", 1)
    with FaultProxy((host, int(port))) as proxy:
        yield proxy


async def _timeouts(harness: Harness, workflow_id: str) -> list[tuple[str | None, int]]:
    """The model steps' heartbeat timeouts in a turn's history, as the workflow weighs them."""
    history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
    found = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            continue
        failure = event.activity_task_timed_out_event_attributes.failure
        payloads = failure.timeout_failure_info.last_heartbeat_details.payloads
        details = await DataConverter.default.decode(list(payloads))
        err = _timed_out(*details)
        found.append(death_of(err))
    return found


async def test_a_live_worker_cut_off_from_temporal_does_not_spend_the_crash_budget(
    harness: Harness, temporal_proxy: FaultProxy
) -> None:
    """One worker, its link to Temporal blackholed past the heartbeat timeout while the
    step streams, twice: both attempts time out, yet the worker lived on (it ran the second
    one), so the first costs nothing; at ``TURNS_CRASH_RETRIES=1`` the turn completes
    (counting every timeout as a death, it would end ``WorkerCrashLoop``)."""
    worker = await asyncio.to_thread(
        harness.start_worker, TEMPORAL_ADDRESS=temporal_proxy.address, TURNS_CRASH_RETRIES="1"
    )
    conversation = harness.conv(f"cutoff-{uuid.uuid4().hex[:6]}")
    text = " ".join(f"w{i}" for i in range(150))  # 12 s: an attempt outlives its blackhole
    model = harness.script([{"text": text, "delay_ms": 80}])
    request = await harness.turns.submit(conversation, "go", model=model)
    workflow_id = f"{conversation}/turn-1"
    for attempt in (1, 2):

        async def started(n: int = attempt) -> bool:
            """Attempt ``n`` of the step runs and has heartbeat."""
            try:
                handle = harness.client.get_workflow_handle(workflow_id)
                history = await handle.fetch_history()
                pending = (await handle.describe()).raw_description.pending_activities
            except Exception:
                return False
            scheduled = sum(
                1
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and e.activity_task_scheduled_event_attributes.activity_type.name == MODEL_STEP
            )
            return scheduled >= n and any(
                p.activity_type.name == MODEL_STEP
                and p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                and p.HasField("last_heartbeat_time")
                for p in pending
            )

        await wait_until(started, 120)
        await asyncio.sleep(1.0)  # streaming, heartbeating
        temporal_proxy.blackhole()
        await asyncio.sleep(5.0)  # past the 2 s heartbeat timeout
        temporal_proxy.heal()

        async def timed_out(n: int = attempt) -> bool:
            return len(await _timeouts(harness, workflow_id)) >= n

        await wait_until(timed_out, 120)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 120)
    assert result.status == "completed", result.error
    assert result.text == text
    deaths = await _timeouts(harness, workflow_id)
    assert len(deaths) == 2 and deaths[0][0] is not None
    assert deaths[0] == deaths[1], "both on the one worker, which lived on"
    assert crash_cost(deaths) == 1
    assert worker.proc.poll() is None, "the worker had to restart"


def test_the_wait_after_a_loss_grows_with_what_the_losses_weigh() -> None:
    """Kills of busy workers (each a fraction of a death) or of one that came back keep the
    wait at a second; a worker that ran the turn alone, or a store outage, backs off."""

    def seconds(deaths: int, timeouts: list[tuple[str | None, int]]) -> float:
        return death_wait(deaths, timeouts).total_seconds()

    storm = [(f"worker-{i}", 8) for i in range(4)]  # each 1/4 of a death
    assert [seconds(n, storm[:n]) for n in range(1, 5)] == [1.0, 1.0, 1.0, 1.0]
    assert seconds(8, [(f"worker-{i}", 8) for i in range(8)]) == 2.0
    alone = [(f"worker-{i}", 1) for i in range(6)]
    assert [seconds(n, alone[:n]) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert seconds(5, [("a", 1)] * 5) == 1.0  # it heartbeat again each time: a partition
    assert [seconds(n, []) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]  # outages, shutdowns


def test_a_loss_liveness_detected_is_retried_at_once_until_the_losses_weigh_more() -> None:
    """The liveness window was the wait of a ``WorkerLost``: none while the losses weigh one
    death at most; past that the same backoff as any death's."""
    storm = [(f"worker-{i}", 4) for i in range(5)]  # each 1/4 of a death
    assert [lost_wait(n, storm[:n]) for n in range(1, 5)] == [None] * 4
    assert lost_wait(5, storm) == death_wait(5, storm) == timedelta(seconds=2)
    alone = [(f"worker-{i}", 1) for i in range(4)]
    waits = [lost_wait(n, alone[:n]) for n in range(1, 5)]
    assert waits[0] is None
    assert [w.total_seconds() for w in waits[1:] if w is not None] == [2.0, 4.0, 8.0]
