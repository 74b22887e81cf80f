"""The plain runner (the default, ``TURNS_WORKFLOW_SANDBOX=off``) gives codecs the same
serialization contexts as the stock sandbox, a worker still runs turns in the sandbox when
asked, and a task's payloads are walked only when a walk could change one
(``durable_turns.payload_visits``). Kept apart from ``test_sandbox.py``, whose module the
sandbox imports (this one imports what the sandbox must not)."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from durable_turns import payload_visits
from durable_turns.config import Settings
from durable_turns.sandbox import (
    LeanSandboxedWorkflowRunner,
    LeanUnsandboxedWorkflowRunner,
    workflow_runner,
)
from durable_turns.update_guard import answerable_bytes
from tests.support.harness import Harness
from tests.test_sandbox import run_once


def plain() -> LeanUnsandboxedWorkflowRunner:
    return LeanUnsandboxedWorkflowRunner(answerable_bytes(None))


async def test_plain_runner_gives_codecs_the_stock_contexts(client: Client) -> None:
    stock = await run_once(client, SandboxedWorkflowRunner(), "stock-p")
    lean = await run_once(client, plain(), "plain")
    assert any("workflow sandbox-X-child" in line for line in lean), lean
    assert sorted(lean) == sorted(stock)


def test_the_worker_runs_its_workflows_plain_unless_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TURNS_WORKFLOW_SANDBOX", raising=False)
    assert Settings.from_env().workflow_sandbox is False
    default: Any = workflow_runner(sandboxed=Settings.from_env().workflow_sandbox)
    assert isinstance(default, LeanUnsandboxedWorkflowRunner)
    for value, sandboxed in (("on", True), ("ON", True), ("1", True), ("off", False)):
        monkeypatch.setenv("TURNS_WORKFLOW_SANDBOX", value)
        assert Settings.from_env().workflow_sandbox is sandboxed
    monkeypatch.setenv("TURNS_WORKFLOW_SANDBOX", "sometimes")
    with pytest.raises(ValueError, match="TURNS_WORKFLOW_SANDBOX must be on or off"):
        Settings.from_env()
    asked: Any = workflow_runner(sandboxed=True)
    assert isinstance(asked, LeanSandboxedWorkflowRunner)


async def test_a_worker_runs_turns_in_the_sandbox_when_asked(harness: Harness) -> None:
    """``TURNS_WORKFLOW_SANDBOX=on``: the conversation and its turns (a tool call, a second
    step) run under the sandbox's restrictions, as every worker did before the default."""
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


async def test_payload_walks_are_skipped_only_when_nothing_would_change(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a codec every walk runs (the codec sees each payload with its context, as without
    the shortcut); without a codec or external storage none does, and workflows run the same."""
    walks: list[str] = []
    stock_decode, stock_encode = payload_visits._STOCK_DECODE, payload_visits._STOCK_ENCODE

    async def decode(*args: Any, **kwargs: Any) -> Any:
        walks.append("decode")
        return await stock_decode(*args, **kwargs)

    async def encode(*args: Any, **kwargs: Any) -> Any:
        walks.append("encode")
        return await stock_encode(*args, **kwargs)

    monkeypatch.setattr(payload_visits, "_STOCK_DECODE", decode)
    monkeypatch.setattr(payload_visits, "_STOCK_ENCODE", encode)
    stock = await run_once(client, plain(), "walks-stock")  # not installed: stock walks
    assert payload_visits.install()
    try:
        walks.clear()
        with_codec = await run_once(client, plain(), "walks-codec")
        assert "decode" in walks and "encode" in walks
        assert sorted(with_codec) == sorted(stock)
        walks.clear()
        assert await run_once(client, plain(), "walks-none", codec=False) == []
        assert walks == []
    finally:
        payload_visits.uninstall()
