"""Issue 25, item 9: two versions of the worker on one task queue, every turn completes.

During a rolling deploy the old and the new worker serve one task queue: a turn's workflow
tasks go to either, and each of its activities to either. What one version writes (an
activity's input or result, a turn's input or result) the other reads.

* ``test_the_previous_release_beside_this_one``: the previous release's worker, a
  ``git archive`` of :data:`PREVIOUS_RELEASE` run from the test's tmp dir with the same
  virtualenv, beside this one; turns started on each; both serve activities; every turn
  completes. Skipped, saying why, where the repository's history is not at hand.
* ``test_a_next_release_with_new_fields_beside_this_one``: a worker of this code that adds
  a field to every internal model it writes (what the next release adding a field to
  ``TurnRef`` does; ``tests/support/next_release``) beside this one. With strict models
  (``extra="forbid"``, before this change) this worker rejected those payloads: the turns
  whose activities met it spent their retries and failed ("Extra inputs are not permitted").
"""

from __future__ import annotations

import asyncio
import subprocess
import tarfile
import uuid
from io import BytesIO
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType

from durable_turns.contract import TurnResult
from tests.support.harness import ROOT, Harness, WorkerProcess

PREVIOUS_RELEASE = "72cf68c22630c06647ec2837d1e9e3a6fdf56f96"
"""main before this change (issue 25, items 9 and 10)."""

SHIM = ROOT / "tests" / "support" / "next_release"

WEATHER = [
    {"text": "Let me look.", "tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}]},
    {"text": "Forecast: {tool_result}."},
]


def _previous_release(tmp: Path) -> Path:
    """The previous release's tree, from this repository's history, or a skip."""
    try:
        blob = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", PREVIOUS_RELEASE],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"the previous release {PREVIOUS_RELEASE[:10]} is not in git history: {e!r}")
    out = tmp / "previous-release"
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(out, filter="tar")
    return out


async def _workers_of(harness: Harness, workflow_ids: list[str]) -> set[str]:
    """The identities of the workers that ran the turns' activities."""
    seen: set[str] = set()
    for wid in workflow_ids:
        async for event in harness.client.get_workflow_handle(wid).fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                seen.add(event.activity_task_started_event_attributes.identity)
    return seen


async def _turns(harness: Harness, tag: str, n: int) -> list[TurnResult]:
    """``n`` conversations, two turns each (a tool call in the first), all at once."""

    async def conversation(i: int) -> list[TurnResult]:
        conv = harness.conv(f"{tag}-{i}")
        first = await harness.send(conv, "weather?", model=harness.script(WEATHER))
        second = await harness.send(conv, f"thanks {i}", model="demo:echo")
        return [first, second]

    done = await asyncio.wait_for(asyncio.gather(*(conversation(i) for i in range(n))), 150)
    return [r for pair in done for r in pair]


def _check(results: list[TurnResult]) -> None:
    for r in results:
        assert r.status == "completed", (r.workflow_id, r.error)
    assert all("Forecast: sunny" in r.text for r in results[::2]), [r.text for r in results]
    assert all(r.text.startswith("You said: thanks") for r in results[1::2])


def _pid_identity(worker: WorkerProcess) -> str:
    return f"{worker.proc.pid}@"


async def _mixed(harness: Harness, other: WorkerProcess, tag: str) -> None:
    ours = harness.start_worker()
    results = await _turns(harness, tag, 6)
    _check(results)
    identities = await _workers_of(harness, [r.workflow_id for r in results])
    for worker in (ours, other):
        assert any(i.startswith(_pid_identity(worker)) for i in identities), (
            f"worker {worker.proc.pid} ran none of the activities: {identities}"
        )


async def test_the_previous_release_beside_this_one(harness: Harness) -> None:
    previous = _previous_release(harness.tmp)
    old = WorkerProcess(
        harness.env(PYTHONPATH=str(previous)),
        harness.tmp / "worker-previous.log",
        [str(previous / "worker.py")],
    )
    harness.workers.append(old)
    old.wait_ready()
    await _mixed(harness, old, f"prev-{uuid.uuid4().hex[:4]}")


async def test_a_next_release_with_new_fields_beside_this_one(harness: Harness) -> None:
    nxt = WorkerProcess(
        harness.env(PYTHONPATH=f"{SHIM}:{ROOT}", TURNS_NEXT_RELEASE_FIELD="1"),
        harness.tmp / "worker-next.log",
    )
    harness.workers.append(nxt)
    nxt.wait_ready()
    await _mixed(harness, nxt, f"next-{uuid.uuid4().hex[:4]}")
    assert "TURNS_NEXT_RELEASE_FIELD" in nxt.log_tail(200_000), "the shim was loaded"
