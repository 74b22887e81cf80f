"""A turn started with the `temporal` CLI alone, exactly as the README shows it."""

from __future__ import annotations

import asyncio
import json
import subprocess

from durable_turns.devserver import temporal_binary
from tests.support.harness import Harness


def temporal(address: str, *args: str) -> str:
    out = subprocess.run(
        [temporal_binary(), *args, "--address", address],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


async def _state(harness: Harness, conversation: str) -> dict:
    out = await asyncio.to_thread(
        temporal,
        harness.address,
        "workflow",
        "query",
        "--workflow-id",
        conversation,
        "--name",
        "state",
        "--output",
        "json",
    )
    return json.loads(out)["queryResult"][0]


async def test_signal_with_start_and_continue_from_the_cli(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("cli-conv")
    # README: "Start a turn with the temporal CLI"
    await asyncio.to_thread(
        temporal,
        harness.address,
        "workflow",
        "signal-with-start",
        "--workflow-id",
        conversation,
        "--type",
        "ConversationWorkflow",
        "--task-queue",
        harness.task_queue,
        "--signal-name",
        "submitMessages",
        "--signal-input",
        '{"messages":[{"role":"user","content":"What is the weather in Rome?"}]}',
    )
    for _ in range(100):
        state = await _state(harness, conversation)
        if state["last_result"] and state["last_result"]["turn_number"] == 1:
            break
        await asyncio.sleep(0.1)
    result = state["last_result"]
    assert result["status"] == "completed"
    assert "forecast for Rome" in result["text"]

    await asyncio.to_thread(
        temporal,
        harness.address,
        "workflow",
        "signal",
        "--workflow-id",
        conversation,
        "--name",
        "continueLastTurn",
    )
    for _ in range(100):
        state = await _state(harness, conversation)
        if state["last_result"]["turn_number"] == 2:
            break
        await asyncio.sleep(0.1)
    continued = state["last_result"]
    assert continued["continuation"] is True
    assert continued["status"] == "completed"
    messages = await (await harness.store()).messages(conversation)
    assert [m.role for m in messages] == ["user", "assistant", "assistant"]
    assert messages[2].metadata["continuation"] is True
