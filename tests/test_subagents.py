"""Sub-agents (Think's ``agentTool()``): an agent tool's call runs a child conversation's turn
as a child workflow of its own, whose reply is the tool's result.

Real dev server, real worker processes, the demo provider playing scripts the tests write
(``tests/support/agent_tools.py`` declares the agents).
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.client import WorkflowExecutionStatus, WorkflowHistory

from durable_turns.client import TurnsClient
from durable_turns.contract import agent_conversation_id, turn_workflow_id
from durable_turns.messages import ToolResultPart
from durable_turns.streams import AGENT_CHUNK, StreamEvent
from durable_turns.web.protocol import UIMessageStream
from tests.support.harness import Harness
from tests.support.hooks import calls, wait_for_hook
from tests.support.probes import chunk_backend, wait_until
from tests.test_replay import HISTORIES, replayer, settled_history

AGENT_TOOLS = "tests.support.tools,tests.support.agent_tools"
SUBAGENT_WORKER = {"TURNS_TOOLS": AGENT_TOOLS}
"""The worker that records (and freshly replays) the sub-agent histories."""
SUBAGENT_HISTORIES = HISTORIES / "subagents"
"""Recorded by ``python -m tests.record_histories recorded-sa subagents``; replayed with the
others by ``tests/test_replay.py``."""

PARENT = [
    {"tool_calls": [{"name": "research", "input": {"task": "What is 2 + 3?"}}]},
    {"text": "The researcher says: {tool_result}"},
]

CHILD = [
    {"text": "Let me add.", "tool_calls": [{"name": "add", "input": {"a": 2, "b": 3}}]},
    {"text": "The sum is {tool_result}."},
]
"""Two model steps of the child, a tool call between them."""


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


SLOW_PARENT = [
    {"tool_calls": [{"name": "research", "id": "call_r", "input": {"task": "count slowly"}}]},
    {"text": "The researcher says: {tool_result}"},
]

SLOW_CHILD = [{"text": " ".join(f"w{i}" for i in range(40)), "delay_ms": 150}]
"""About 6 s of streaming: long enough to cancel or kill the parent's worker mid-child."""


async def child_streaming(harness: Harness, child_id: str, chunks: int = 3) -> None:
    """Wait until the child's stream holds ``chunks`` text deltas."""
    streams = await chunk_backend(harness)
    try:

        async def streamed() -> bool:
            events = await streams.read(child_id)
            return sum(e.type == "chunk" for e in events) >= chunks

        await wait_until(streamed, within=60)
    finally:
        await streams.close()


def relayed(events: list[Any], call_id: str) -> list[dict[str, Any]]:
    """The parent's agent-chunk events of one call, each child offset once, in order."""
    out: list[dict[str, Any]] = []
    last = -1
    for ev in events:
        if ev.type == AGENT_CHUNK and ev.data["tool_call_id"] == call_id:
            if ev.data["offset"] > last:
                last = ev.data["offset"]
                out.append(ev.data)
    return out


def child_text(chunks: list[dict[str, Any]]) -> str:
    return "".join(
        c["event"]["data"].get("text", "")
        for c in chunks
        if c["event"]["type"] == "chunk" and c["event"]["data"].get("type") == "text-delta"
    )


async def test_the_childs_chunks_appear_on_the_parents_stream(harness: Harness) -> None:
    start(harness)
    child_script(harness, CHILD)
    conversation = harness.conv("agent-stream")
    url = f"sqlite:///{harness.tmp / 'data' / 'chunks.db'}"
    turns = TurnsClient(harness.client, harness.task_queue, stream_url=url)
    started = await turns.start(conversation, "go", model=harness.script(SLOW_PARENT))
    events: list[Any] = []
    async for ev in turns.chunks(conversation, started.turn_number):
        events.append(ev)  # read live, as a client does, until the parent's turn-finish
    result = await turns.result(conversation, started)
    await turns.aclose()
    assert result.status == "completed", result.error
    chunks = relayed(events, "call_r")
    child_id = child_of(conversation, 1, "call_r")
    assert {c["conversation_id"] for c in chunks} == {child_id.rsplit("/turn-", 1)[0]}
    assert {c["tool_name"] for c in chunks} == {"research"}
    # the child's whole stream, in order: its three steps, its tool call's result, its end
    streams = await chunk_backend(harness)
    own = await streams.read(child_id)
    await streams.close()
    assert [c["offset"] for c in chunks] == [e.offset for e in own]
    assert [c["event"]["type"] for c in chunks] == [e.type for e in own]
    assert chunks[-1]["event"]["type"] == "turn-finish"
    assert child_text(chunks).endswith("The sum is 5.")
    # all of it before the parent's own result of the call
    [result_at] = [i for i, e in enumerate(events) if e.type == "tool-result"]
    assert max(i for i, e in enumerate(events) if e.type == AGENT_CHUNK) < result_at
    assert events[result_at].data["output"] == "Let me add.\n\nThe sum is 5."
    # the front door: the child's reply so far as the call's preliminary output, then its result
    ui = UIMessageStream("m")
    ui.begin_turn(started.turn_number)
    sent = [c for ev in events for c in ui.feed(ev) if c.get("toolCallId") == "call_r"]
    kinds = [(c["type"], c.get("preliminary", False)) for c in sent]
    assert kinds.index(("tool-input-available", False)) < kinds.index(
        ("tool-output-available", True)
    )
    assert kinds[-1] == ("tool-output-available", False)
    preliminary = [c["output"] for c in sent if c.get("preliminary")]
    assert preliminary and preliminary[-1]["text"] == "Let me add.\n\nThe sum is 5."
    assert preliminary[-1]["status"] == "completed"
    assert sent[-1]["output"] == "Let me add.\n\nThe sum is 5."


def test_preliminary_output_drops_repeats_and_restarts_a_reset_step() -> None:
    ui = UIMessageStream("m")
    ui.begin_turn(1)

    def agent(offset: int, kind: str, data: dict[str, Any], attempt: int = 1) -> Any:
        event = {"type": kind, "data": data, "step": 0, "attempt": attempt}
        body = {"tool_call_id": "c", "tool_name": "a", "offset": offset, "event": event}
        return StreamEvent(offset=100 + offset, type=AGENT_CHUNK, data=body)

    def texts(*evs: Any) -> list[str]:
        return [c["output"]["text"] for ev in evs for c in ui.feed(ev)]

    long = "x" * 100
    assert texts(agent(0, "step-start", {})) == [""]
    assert texts(agent(1, "chunk", {"type": "text-delta", "text": long})) == [long]
    assert texts(agent(1, "chunk", {"type": "text-delta", "text": long})) == []  # a repeat
    assert texts(agent(2, "chunk", {"type": "text-delta", "text": "y"})) == []  # small growth
    assert texts(agent(3, "reset", {}, attempt=2)) == [""]  # the step is retried: start again
    assert texts(agent(4, "chunk", {"type": "text-delta", "text": "z"}, attempt=2)) == []
    assert texts(agent(5, "chunk", {"type": "text-delta", "text": "old"}, attempt=1)) == []
    assert texts(agent(6, "step-finish", {}, attempt=2)) == ["z"]


async def test_cancelling_the_parent_cancels_the_child(harness: Harness) -> None:
    start(harness)
    child_script(harness, SLOW_CHILD)
    conversation = harness.conv("agent-cancel")
    started = await harness.turns.start(conversation, "go", model=harness.script(SLOW_PARENT))
    child_id = child_of(conversation, 1, "call_r")
    await child_streaming(harness, child_id)
    await harness.turns.cancel(conversation)
    result = await harness.turns.result(conversation, started)
    assert result.status == "aborted"
    child = await harness.client.get_workflow_handle(child_id).result()
    assert child["status"] == "aborted"  # it stored what it had streamed, and stopped
    stored = await (await harness.store()).messages(child_id.rsplit("/turn-", 1)[0])
    assert stored[-1].role == "assistant" and 0 < len(stored[-1].text) < len(SLOW_CHILD[0]["text"])
    [run] = await runs_of(harness, child_id)
    assert run.status == WorkflowExecutionStatus.COMPLETED


async def test_a_parent_recovered_elsewhere_reattaches_to_its_running_child(
    harness: Harness,
) -> None:
    first = start(harness)
    child_script(harness, SLOW_CHILD)
    conversation = harness.conv("agent-crash")
    started = await harness.turns.start(conversation, "go", model=harness.script(SLOW_PARENT))
    child_id = child_of(conversation, 1, "call_r")
    await child_streaming(harness, child_id, chunks=5)
    first.kill()  # the parent's worker (and the child's, and the relay's) dies mid-child
    start(harness)
    result = await harness.turns.result(conversation, started)
    assert result.status == "completed", result.error
    assert result.text == f"The researcher says: {SLOW_CHILD[0]['text']}"
    [run] = await runs_of(harness, child_id)  # one child workflow ran, no second
    assert run.status == WorkflowExecutionStatus.COMPLETED
    parent_history = await harness.client.get_workflow_handle(result.workflow_id).fetch_history()
    starts = [
        e
        for e in parent_history.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    assert len(starts) == 1
    # the relay started again where the parent's stream stopped: no child offset twice
    streams = await chunk_backend(harness)
    events = await streams.read(result.workflow_id)
    own = await streams.read(child_id)
    await streams.close()
    offsets = [e.data["offset"] for e in events if e.type == AGENT_CHUNK]
    assert offsets == sorted(set(offsets))
    assert offsets[-1] == own[-1].offset


async def test_client_tools_inside_a_sub_agent_are_a_typed_error(harness: Harness) -> None:
    start(harness)
    child_script(
        harness,
        [
            {
                "tool_calls": [
                    {"name": "where_am_i", "input": {}},
                    {"name": "wipe_disk", "input": {}},
                ]
            },
            {"text": "{tool_results}"},
        ],
        name="asker",
    )
    parent = [
        {"tool_calls": [{"name": "asker", "id": "call_a", "input": {"task": "where?"}}]},
        {"text": "{tool_result}"},
    ]
    conversation = harness.conv("agent-client")
    result = await harness.send(conversation, "go", model=harness.script(parent))
    assert result.status == "completed", result.error
    assert "AgentClientTool: tool 'where_am_i' runs on the client" in result.text
    assert "AgentClientTool: tool 'wipe_disk' needs the user's approval" in result.text
    assert not [r for r in harness.tool_runs() if r["tool"] == "wipe_disk"]
    state = await harness.turns.state(conversation)
    assert state.running is None  # nothing waits on a client that will never be asked


async def record_subagents(harness: Harness, conversation: str) -> list[WorkflowHistory]:
    """A conversation whose turn calls an agent tool: the conversation's, the parent turn's
    and the child turn's histories."""
    child_script(harness, CHILD)
    result = await harness.send(conversation, "go", model=harness.script(SLOW_PARENT))
    assert result.status == "completed", result.error
    child = harness.client.get_workflow_handle(child_of(conversation, 1, "call_r"))
    return [
        await settled_history(harness, conversation),
        await harness.client.get_workflow_handle(result.workflow_id).fetch_history(),
        await child.fetch_history(),
    ]


async def test_fresh_subagent_histories_replay(harness: Harness) -> None:
    harness.start_worker(**SUBAGENT_WORKER)
    for history in await record_subagents(harness, harness.conv("replay-sa")):
        await replayer().replay_workflow(history)
