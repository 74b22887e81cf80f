"""Sub-agents (Think's ``agentTool()``): an agent tool's call runs a child conversation's turn
as a child workflow of its own, whose reply is the tool's result.

Real dev server, real worker processes, the demo provider playing scripts the tests write
(``tests/support/agent_tools.py`` declares the agents).
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.client import WorkflowExecutionStatus

from durable_turns.contract import agent_conversation_id, turn_workflow_id
from durable_turns.messages import ToolResultPart
from tests.support.harness import Harness
from tests.support.hooks import calls, wait_for_hook

AGENT_TOOLS = "tests.support.tools,tests.support.agent_tools"

PARENT = [
    {"tool_calls": [{"name": "research", "input": {"task": "What is 2 + 3?"}}]},
    {"text": "The researcher says: {tool_result}"},
]

CHILD = [
    {"text": "I see {request.tools} under {request.system}."},
    {"tool_calls": [{"name": "add", "input": {"a": 2, "b": 3}}]},
    {"text": "The sum is {tool_result}."},
]
"""Step 0 shows what reached the child's model; each step is one model step of the child."""


def start(harness: Harness, **env: str) -> Any:
    return harness.start_worker(TURNS_TOOLS=AGENT_TOOLS, **env)


def child_script(harness: Harness, steps: list[dict[str, Any]], name: str = "research") -> None:
    (harness.tmp / f"{name}.json").write_text(json.dumps(steps))


def child_of(conversation: str, turn: int, call_id: str) -> str:
    return turn_workflow_id(agent_conversation_id(conversation, turn, call_id), 1)


async def runs_of(harness: Harness, workflow_id: str) -> list[Any]:
    return [wf async for wf in harness.client.list_workflows(f"WorkflowId = '{workflow_id}'")]


async def test_a_sub_agents_reply_is_the_tool_result(harness: Harness) -> None:
    start(harness)
    child_script(
        harness,
        [
            {"text": "tools {request.tools}; system {request.system}"},
        ],
    )
    conversation = harness.conv("agent")
    result = await harness.send(
        conversation, "ask the researcher", model=harness.script(PARENT), metadata={"u": 1}
    )
    assert result.status == "completed", result.error
    [call] = [
        p
        for m in await (await harness.store()).messages(conversation)
        for p in m.parts
        if isinstance(p, ToolResultPart)
    ]
    assert call.tool_name == "research" and not call.is_error, call.output
    # the child's model was offered the agent's tools only, under the agent's system prompt
    assert call.output == 'tools ["add","slow"]; system You are the researcher sub-agent.'
    assert result.text == f"The researcher says: {call.output}"
    child_conv = agent_conversation_id(conversation, 1, call.tool_call_id)
    # its own transcript: the task, then its reply; the parent's holds none of it
    child_messages = await (await harness.store()).messages(child_conv)
    assert [m.role for m in child_messages] == ["user", "assistant"]
    assert child_messages[0].text == "What is 2 + 3?"
    assert child_messages[1].text == call.output
    parent_texts = [m.text for m in await (await harness.store()).messages(conversation)]
    assert "What is 2 + 3?" not in parent_texts
    # its own hooks ran (with the parent turn's metadata), the worker's did not see it
    [before] = calls(harness, "research.before_turn")
    assert before["conversation_id"] == child_conv
    assert before["tools"] == ["add", "slow"]
    assert before["system"] == "You are the researcher sub-agent."
    assert before["model"] == "demo:research.json"
    assert before["metadata"] == {"u": 1}
    await wait_for_hook(harness, "research.on_chat_response", conversation_id=child_conv)
    # its own workflow, a child of the parent's turn, with its own history
    child_id = turn_workflow_id(child_conv, 1)
    [run] = await runs_of(harness, child_id)
    assert run.status == WorkflowExecutionStatus.COMPLETED
    assert run.parent_id == result.workflow_id
    child_result = await harness.client.get_workflow_handle(child_id).result()
    assert child_result["status"] == "completed"
