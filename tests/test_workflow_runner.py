"""Which runner runs which workflow: the engine's two plain by default (the SDK's public
``UnsandboxedWorkflowRunner``), in the SDK's sandbox with ``TURNS_WORKFLOW_SANDBOX=on``, and
every other workflow of the worker in the runner it had (``durable_turns._temporal.runner``)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from durable_turns import DurableTurnsPlugin
from durable_turns._temporal.runner import PASSTHROUGH, EngineWorkflowRunner
from durable_turns.config import Settings
from durable_turns.runtime import WORKFLOWS
from tests.support.harness import Harness
from tests.support.team_workflows import TeamGreeting, team_greet


def test_the_engine_runs_its_workflows_plain_unless_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TURNS_WORKFLOW_SANDBOX", raising=False)
    assert Settings.from_env().workflow_sandbox is False
    team = SandboxedWorkflowRunner()
    plain = EngineWorkflowRunner(WORKFLOWS, team, sandboxed=False)
    assert isinstance(plain.own, UnsandboxedWorkflowRunner) and plain.other is team
    asked = EngineWorkflowRunner(WORKFLOWS, team, sandboxed=True)
    assert isinstance(asked.own, SandboxedWorkflowRunner) and asked.own is not team
    for value, sandboxed in (("on", True), ("ON", True), ("1", True), ("off", False)):
        monkeypatch.setenv("TURNS_WORKFLOW_SANDBOX", value)
        assert Settings.from_env().workflow_sandbox is sandboxed
    monkeypatch.setenv("TURNS_WORKFLOW_SANDBOX", "sometimes")
    with pytest.raises(ValueError, match="TURNS_WORKFLOW_SANDBOX must be on or off"):
        Settings.from_env()


def test_every_pass_through_module_says_why() -> None:
    assert all(len(reason) > 20 for reason in PASSTHROUGH.values())
    assert not any(m.endswith((".conversation", ".turn")) for m in PASSTHROUGH)


@pytest.mark.parametrize("sandboxed", [False, True], ids=["plain", "sandboxed"])
async def test_a_teams_own_workflow_keeps_its_runner(
    client: Client, tmp_path: object, sandboxed: bool
) -> None:
    """The plugin's runner takes only the engine's workflows: a team's own workflow on the same
    worker still runs in the runner the worker had (the SDK's sandbox by default, or the
    team's unsandboxed runner)."""
    settings = dataclasses.replace(
        Settings.from_env(), workflow_sandbox=sandboxed, store_url=f"sqlite:///{tmp_path}/t.db"
    )
    queue = f"runner-{uuid.uuid4().hex[:8]}"
    plugin = DurableTurnsPlugin(settings)
    bound = Client(client.service_client, namespace=client.namespace, plugins=[plugin])
    for team_runner, in_sandbox in ((None, True), (UnsandboxedWorkflowRunner(), False)):
        extra = {} if team_runner is None else {"workflow_runner": team_runner}
        async with Worker(
            bound, task_queue=queue, workflows=[TeamGreeting], activities=[team_greet], **extra
        ):
            result = await bound.execute_workflow(
                TeamGreeting.run, "team", id=f"{queue}-{in_sandbox}", task_queue=queue
            )
        assert result == ("hello, team", in_sandbox)


async def test_a_worker_runs_turns_in_the_sandbox_when_asked(harness: Harness) -> None:
    """``TURNS_WORKFLOW_SANDBOX=on``: the conversation and its turns (a tool call, a second
    step) run under the SDK sandbox's restrictions."""
    harness.start_worker(TURNS_WORKFLOW_SANDBOX="on")
    conversation = harness.conv("sandboxed")
    model = harness.script(
        [
            {
                "text": "Looking.",
                "tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}],
            },
            {"text": "Done: {tool_results}."},
        ]
    )
    for _ in range(2):
        result = await harness.send(conversation, "weather?", model=model)
        assert result.status == "completed" and result.steps == 2, result
    assert result.turn_number == 2
