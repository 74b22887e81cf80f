"""``TURNS_MAX_CONCURRENT_ACTIVITIES``: the activity slots of an engine worker are a setting
(default 200, as before), the worker runs with what it says, and a turn past them is
queued visibly: ``turns state`` and ``TurnsClient.waiting_for_worker`` say ``queued: …``
(and ``state`` is answered, not ``NoWorker``), the chat page gets a ``data-waiting`` chunk
with ``waiting_for: "activity_slot"``, and the turn streams once a slot frees. Real dev
server, real worker processes with one slot, turns whose model steps stream slowly; and the
one case the server's answers alone decide (a dead worker's poller still listed: its lost
step waits for a worker, not a slot), on described turns."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.failure.v1 import ApplicationFailureInfo, Failure, TimeoutFailureInfo
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse
from temporalio.client import Client

from durable_turns.config import Settings
from durable_turns.contract import MODEL_STEP, WORKER_LOST
from durable_turns.presence import QUEUED, WAITING, Workers, waiting_task
from durable_turns.runtime import running_worker
from tests.support.harness import Harness
from tests.support.history import activity_spans
from tests.support.web import chat_body, user_message
from tests.test_newcomer import turns

SLOW = [{"text": "word", "repeat": 100, "delay_ms": 100}]
"""One model step that streams for about 10 s: it holds the worker's one slot that long."""

BUSY = f"{QUEUED}: every worker's activity slots are busy (1 worker polling task queue "


def test_the_activity_slots_are_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNS_MAX_CONCURRENT_ACTIVITIES", raising=False)
    assert Settings.from_env().max_concurrent_activities == 200
    monkeypatch.setenv("TURNS_MAX_CONCURRENT_ACTIVITIES", "500")
    assert Settings.from_env().max_concurrent_activities == 500
    monkeypatch.setenv("TURNS_MAX_CONCURRENT_ACTIVITIES", "0")
    with pytest.raises(ValueError, match="TURNS_MAX_CONCURRENT_ACTIVITIES"):
        Settings.from_env()


async def test_a_worker_runs_with_the_slots_the_setting_says(
    client: Client, tmp_path: Path
) -> None:
    settings = dataclasses.replace(
        Settings.from_env(),
        task_queue=f"slots-{tmp_path.name}",
        store_url=f"sqlite:///{tmp_path}/t.db",
        data_dir=tmp_path / "data",
        max_concurrent_activities=7,
    )
    async with running_worker(client, settings) as worker:
        assert worker.config().get("max_concurrent_activities") == 7


def _described(
    waited_s: float, failure: Failure | None, by: str
) -> DescribeWorkflowExecutionResponse:
    """A turn whose model step was scheduled ``waited_s`` ago and not started; its last
    attempt failed with ``failure`` on worker ``by``."""
    activity = PendingActivityInfo(
        activity_type={"name": MODEL_STEP},
        state=PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED,
        last_failure=failure,
        last_worker_identity=by,
    )
    activity.scheduled_time.FromNanoseconds(int((time.time() - waited_s) * 1e9))
    return DescribeWorkflowExecutionResponse(pending_activities=[activity])


def test_only_the_worker_that_lost_the_attempt_is_not_counted_as_busy() -> None:
    """A dead worker's poller stays listed for 80 s: alone, the step it lost waits for a
    worker; another worker listed, or a failure that is not a loss, makes it queued."""
    one, two = Workers("q", ("w1",), ("w1",)), Workers("q", ("w1", "w2"), ("w1", "w2"))
    lost = Failure(message="heartbeat", timeout_failure_info=TimeoutFailureInfo())
    gone = Failure(message="x", application_failure_info=ApplicationFailureInfo(type=WORKER_LOST))
    provider = Failure(message="529", application_failure_info=ApplicationFailureInfo(type="X"))
    said = [
        waiting_task(_described(3, failure, "w1"), "turn 't'", 2.0, workers)
        for failure, workers in (
            (lost, one),
            (Failure(message="w", cause=gone), one),
            (lost, two),
            (provider, one),
            (None, one),
        )
    ]
    assert [s.split(":")[0] if s else s for s in said] == [WAITING, WAITING, QUEUED, QUEUED, QUEUED]
    assert said[0] == f"{WAITING}: turn 't''s model_step has waited 3 s for one"
    assert said[2] is not None and "(1 worker polling task queue 'q')" in said[2], said
    assert waiting_task(_described(0.2, None, ""), "turn 't'", 2.0, one) is None  # not yet
    assert waiting_task(_described(1.5, lost, "w1"), "turn 't'", 2.0, one) is None


async def _queued(harness: Harness, conversation: str, turn: int | None, within: float) -> str:
    """What ``waiting_for_worker`` says of the conversation once it says ``queued``."""
    deadline = asyncio.get_running_loop().time() + within
    said: str | None = None
    while asyncio.get_running_loop().time() < deadline:
        said = await harness.turns.waiting_for_worker(conversation, turn)
        if said and said.startswith(QUEUED):
            return said
        await asyncio.sleep(0.2)
    raise AssertionError(f"never queued within {within} s; last said {said!r}")


async def test_a_turn_past_the_slots_says_queued_then_streams(
    harness: Harness, tmp_path: Path
) -> None:
    harness.start_worker(TURNS_MAX_CONCURRENT_ACTIVITIES="1", TURNS_MODEL=harness.script(SLOW))
    first, second = harness.conv("slot-first"), harness.conv("slot-second")
    a = await harness.turns.start(first, "go")
    b = await harness.turns.start(second, "go")
    said = await _queued(harness, second, b.turn_number, within=8)
    assert said.startswith(f"{BUSY}{harness.task_queue!r}): turn '{second}/turn-1''s "), said
    assert "has waited" in said and "TURNS_MAX_CONCURRENT_ACTIVITIES" in said, said
    # the turn holding the slot streams: it is neither queued nor waiting
    assert await harness.turns.waiting_for_worker(first, a.turn_number) is None
    # a worker answers the state query: it is no NoWorker
    state = await harness.turns.state(second)
    assert state.running is not None and state.running.status == "running", state

    out = await asyncio.to_thread(turns, harness, tmp_path, "state", second, timeout=60)
    assert out.returncode == 0, out
    assert json.loads(out.stdout)["running"]["turn_number"] == b.turn_number
    notes = [line for line in out.stderr.splitlines() if line.startswith("# ")]
    assert notes and notes[0].startswith(f"# {BUSY}{harness.task_queue!r}): "), out.stderr

    first_result = await harness.turns.result(first, a)
    second_result = await harness.turns.result(second, b)
    assert first_result.status == second_result.status == "completed"
    assert second_result.text == first_result.text and second_result.text
    [(_, first_ended)] = await activity_spans(harness, a.workflow_id or "", MODEL_STEP)
    [(second_started, _)] = await activity_spans(harness, b.workflow_id or "", MODEL_STEP)
    assert first_ended is not None and second_started >= first_ended, (first_ended, second_started)
    assert await harness.turns.waiting_for_worker(second) is None


async def test_the_chat_page_is_told_a_reply_is_queued_for_a_slot(
    harness: Harness, door: Any
) -> None:
    harness.start_worker(TURNS_MAX_CONCURRENT_ACTIVITIES="1", TURNS_MODEL=harness.script(SLOW))
    fd = door()
    first, second = harness.conv("slot-web-first"), harness.conv("slot-web-second")
    await harness.turns.start(first, "go")
    async with httpx.AsyncClient(timeout=120) as http:
        body = chat_body(second, [user_message("go", "m1")])
        async with http.stream("POST", f"{fd.url}/api/chat", json=body) as r:
            assert r.status_code == 200
            chunks = [
                json.loads(line[len("data: ") :])
                async for line in r.aiter_lines()
                if line.startswith("data: {")
            ]
    kinds = [c["type"] for c in chunks]
    waiting = [c for c in chunks if c["type"] == "data-waiting"]
    assert waiting, kinds
    said = waiting[0]["data"]
    assert said["waiting_for"] == "activity_slot", said
    assert said["message"].startswith(f"{BUSY}{harness.task_queue!r}): "), said
    # the reply streams after it, whole
    assert kinds.index("text-delta") > kinds.index("data-waiting"), kinds
    text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert text.split() == ["word"] * 100, text
    assert kinds[-1] == "finish", kinds[-5:]
