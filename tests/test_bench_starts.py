"""``bench.starts``' figures from a recorded turn history and made-up clocks."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from bench import starts
from bench.common import event_epoch
from bench.cost_run import FIRST_TOKEN_S
from durable_turns.contract import MODEL_STEP

TURN = Path(__file__).parent / "histories" / "v1.0.0__turn-1.json"


def history() -> WorkflowHistory:
    return WorkflowHistory.from_json("conv/turn-1", TURN.read_text())


def test_turn_marks_are_the_first_task_and_the_first_model_step_start() -> None:
    h = history()
    marks = starts.turn_marks(h, MODEL_STEP)
    events = list(h.events)
    kinds = [e.event_type for e in events]
    first_task = kinds.index(EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED)
    assert marks["started"] == event_epoch(events[0])
    assert marks["task_started"] == event_epoch(events[first_task])
    assert marks["task_completed"] == event_epoch(events[first_task + 1])
    step = next(
        e
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == MODEL_STEP
    )
    started = next(
        e
        for e in events
        if e.HasField("activity_task_started_event_attributes")
        and e.activity_task_started_event_attributes.scheduled_event_id == step.event_id
    )
    assert marks["step_started"] == event_epoch(started)
    assert marks["started"] <= marks["task_started"] <= marks["task_completed"]


def test_no_model_step_leaves_no_step_mark() -> None:
    assert "step_started" not in starts.turn_marks(history(), "no_such_activity")


def test_phases_span_each_wait_and_take_the_models_own_delay_off_the_token_waits() -> None:
    marks = {"started": 10.1, "task_started": 10.3, "task_completed": 10.35, "step_started": 10.4}
    got = starts.phases(10.0, 10.9, marks)
    assert got["to_workflow"] == pytest.approx(0.1)
    assert got["to_first_task"] == pytest.approx(0.2)
    assert got["first_task"] == pytest.approx(0.05)
    assert got["step_to_token"] == pytest.approx(0.5 - FIRST_TOKEN_S)
    assert got["wait"] == pytest.approx(0.9 - FIRST_TOKEN_S)
    assert set(got) == set(starts.PHASES)


def test_a_turn_that_never_reached_its_model_step_has_no_step_phase() -> None:
    got = starts.phases(10.0, 11.0, {"started": 10.1})
    assert set(got) == {"to_workflow", "wait"}


def test_burst_summary_percentiles_cpu_per_turn_and_starts_a_second() -> None:
    turns = [
        {"sent": 0.0, "step_started": 1.0, **dict.fromkeys(starts.PHASES, 0.1)},
        {"sent": 0.5, "step_started": 2.0, **dict.fromkeys(starts.PHASES, 0.3)},
    ]
    got = starts.burst_summary(turns, 2, {"worker": 0.08, "server": 0.1})
    assert got["wait"] == {50: pytest.approx(200.0), 99: pytest.approx(298.0)}
    assert got["cpu_ms_per_turn"] == {"worker": 40.0, "server": 50.0}
    assert got["starts_per_s"] == 1.0  # two model steps started in the 2 s since the first request
