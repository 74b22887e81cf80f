"""Issue 25, item 9: two versions of the worker on one task queue, every turn completes.

During a rolling deploy the old and the new worker serve one task queue: a turn's workflow
tasks go to either, and each of its activities to either. What one version writes (an
activity's input or result, a turn's input or result) the other reads.

* ``test_an_earlier_release_beside_this_one``: the previous release's worker
  (:data:`PREVIOUS`), a ``git archive`` of the commit that set its version in
  ``pyproject.toml``, run from the test's tmp dir with the same virtualenv, beside this one; turns started on each; both serve activities; no
  workflow task fails on the other version's payload; every turn completes. Skipped,
  saying why, where the repository's history is not at hand.
* ``test_a_next_release_with_new_fields_beside_this_one``: a worker of this code that adds
  a field to every internal model it writes (what the next release adding a field to
  ``TurnRef`` does; ``tests/support/next_release``) beside this one. With the strict
  readers of the release before this change, the turns never completed ("Failed decoding
  arguments" on every attempt).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tarfile
import uuid
from io import BytesIO
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType

from durable_turns.codec import PYDANTIC_DATA_CONVERTER
from durable_turns.contract import (
    BeginTurnInput,
    ConversationInput,
    PendingRequest,
    StepSummary,
    ToolCallRef,
    TurnInput,
    TurnRef,
    TurnResult,
)
from durable_turns.messages import user_message
from tests.support.harness import ROOT, Harness, WorkerProcess

PREVIOUS = "1.0.0"
"""The release a worker of this code serves beside (CHANGELOG.md): 1.0.0, the compatibility
baseline, until the next release, which names it here and becomes the next one's. Earlier
development builds are drained before an upgrade (docs/deployment.md), never run beside."""


SHIM = ROOT / "tests" / "support" / "next_release"

WEATHER = [
    {"text": "Let me look.", "tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}]},
    {"text": "Forecast: {tool_result}."},
]


PROBE = """
import durable_turns.workflows.conversation as c, durable_turns.contract as k
print(c.__file__, k.TurnInput.model_config.get("extra"))
"""


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, check=True, timeout=60
    ).stdout.decode()


def release_commit(version: str) -> str:
    """The commit of release ``version``: the first that set it in ``pyproject.toml``."""
    found = _git(
        "log", "--reverse", "--format=%H", f'-Sversion = "{version}"', "--", "pyproject.toml"
    )
    if not found.split():
        raise LookupError(f"no commit sets version {version} in pyproject.toml")
    return found.split()[0]


def _release(tmp: Path, version: str) -> Path:
    """The release's tree, from this repository's history, or a skip."""
    try:
        commit = release_commit(version)
        blob = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError, LookupError) as e:
        pytest.skip(f"release {version} is not in this repository's git history: {e!r}")
    out = tmp / f"release-{version}"
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(out, filter="tar")
    return out


async def _audit(harness: Harness, workflow_ids: list[str]) -> tuple[set[str], list[str]]:
    """The identities of the workers that ran the workflows' activities, and the workflow
    tasks that failed because a worker could not read what the other version wrote (an
    activity's input it cannot read fails in that worker's log, checked by the caller)."""
    seen: set[str] = set()
    problems: list[str] = []
    for wid in workflow_ids:
        async for event in harness.client.get_workflow_handle(wid).fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                seen.add(event.activity_task_started_event_attributes.identity)
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                message = event.workflow_task_failed_event_attributes.failure.message
                if "decod" in message.lower():
                    problems.append(f"{wid}: workflow task failed: {message}")
    return seen, problems


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
    conversations = sorted({r.conversation_id for r in results})
    identities, problems = await _audit(harness, [r.workflow_id for r in results] + conversations)
    for worker in (ours, other):
        assert any(i.startswith(_pid_identity(worker)) for i in identities), (
            f"worker {worker.proc.pid} ran none of the activities: {identities}"
        )
    assert problems == [], "a turn's workflow task failed on the other version"
    for worker in (ours, other):
        log = worker.log_tail(1_000_000)
        assert "Failed decoding" not in log and "extra_forbidden" not in log, log[-3000:]


async def test_an_earlier_release_beside_this_one(harness: Harness) -> None:
    release = PREVIOUS
    tree = await asyncio.to_thread(_release, harness.tmp, release)
    probe = await asyncio.to_thread(  # what that worker imports: the release's, strict
        subprocess.run,
        [sys.executable, "-c", PROBE],
        cwd=tree,
        env=harness.env(PYTHONPATH=str(tree)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    workflows, extra = probe.stdout.split()
    assert Path(workflows).is_relative_to(tree), probe.stdout
    assert extra == "ignore"  # a tolerant reader: what this release adds, it leaves alone
    assert f'version = "{release}"' in (tree / "pyproject.toml").read_text()
    old = WorkerProcess(
        harness.env(PYTHONPATH=str(tree)),
        harness.tmp / f"worker-{release}.log",
        [str(tree / "worker.py")],
        cwd=tree,  # the worker puts its directory on sys.path: the release's, not ours
    )
    harness.workers.append(old)
    old.wait_ready()
    await _mixed(harness, old, f"{release}-{uuid.uuid4().hex[:4]}")


async def test_a_next_release_with_new_fields_beside_this_one(harness: Harness) -> None:
    nxt = WorkerProcess(
        harness.env(PYTHONPATH=f"{SHIM}:{ROOT}", TURNS_NEXT_RELEASE_FIELD="1"),
        harness.tmp / "worker-next.log",
    )
    harness.workers.append(nxt)
    nxt.wait_ready()
    await _mixed(harness, nxt, f"next-{uuid.uuid4().hex[:4]}")
    assert "TURNS_NEXT_RELEASE_FIELD" in nxt.log_tail(200_000), "the shim was loaded"


def test_the_lean_writer_leaves_out_defaults_and_reads_back_the_same() -> None:
    """What an earlier release reads: a new field only when set, messages whole."""
    convert = PYDANTIC_DATA_CONVERTER.payload_converter
    ref = TurnRef(conversation_id="c", turn_number=2, request_id="r", owner="o")
    values = [
        TurnInput(conversation_id="c", turn_number=2, new_messages=[user_message("hi")]),
        TurnInput(conversation_id="c", turn_number=2, regenerate="last"),
        BeginTurnInput(turn=ref, new_messages=[user_message("hi")], regenerate=None),
        StepSummary(step=1, tool_calls=[ToolCallRef(tool_call_id="a", tool_name="t")]),
        ConversationInput(queue=[PendingRequest(request_id="x", messages=[user_message("q")])]),
    ]
    for value in values:
        [payload] = convert.to_payloads([value])
        assert convert.from_payloads([payload], [type(value)]) == [value]
        data = json.loads(payload.data)
        if isinstance(value, TurnInput):
            assert ("regenerate" in data) == (value.regenerate is not None)
    plain, regenerate, begin, summary, carried = (
        json.loads(p.data) for p in convert.to_payloads(values)
    )
    assert regenerate["regenerate"] == "last"
    assert "continuation" not in plain and "body" not in plain and "model" not in plain
    assert plain["new_messages"][0]["parts"] == [{"type": "text", "text": "hi"}]
    assert begin["turn"] == {
        "conversation_id": "c",
        "turn_number": 2,
        "request_id": "r",
        "owner": "o",
    }
    assert summary["tool_calls"] == [{"tool_call_id": "a", "tool_name": "t"}]
    assert carried["queue"][0]["messages"][0]["role"] == "user"
    result = TurnResult(
        request_id="r",
        conversation_id="c",
        turn_number=1,
        workflow_id="c/turn-1",
        status="completed",
    )
    assert "text" in json.loads(convert.to_payloads([result])[0].data), "clients read it whole"
