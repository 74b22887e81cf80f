"""Sub-agents (Think's ``agentTool()``): an agent tool's call runs a child conversation's turn
as a child workflow of its own, whose reply is the tool's result.

Real dev server, real worker processes, the demo provider playing scripts the tests write
(``tests/support/agent_tools.py`` declares the agents).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from temporalio.client import WorkflowExecutionStatus, WorkflowHistory

from durable_turns.client import TurnsClient
from durable_turns.contract import agent_call_id, agent_conversation_id, turn_workflow_id
from durable_turns.messages import ToolResultPart
from durable_turns.streams import AGENT_CHUNK, StreamEvent
from durable_turns.web.protocol import UIMessageStream
from tests.support.harness import Harness
from tests.support.hooks import calls, wait_for_hook
from tests.support.probes import chunk_backend, wait_until
from tests.support.web import chat_body, post_chat, user_message
from tests.test_replay import HISTORIES, replayer, settled_history

AGENT_TOOLS = "tests.support.tools,tests.support.agent_tools"
SUBAGENT_WORKER = {"TURNS_TOOLS": AGENT_TOOLS}
"""The worker that records (and freshly replays) the sub-agent histories."""
SUBAGENT_HISTORIES = HISTORIES / "subagents"
"""Recorded by ``python -m tests.record_histories recorded-sa subagents`` (and
``recorded-sac subagents-client``: a sub-agent's client tool answered through the parent);
replayed with the others by ``tests/test_replay.py``."""

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
    """Every run of ``workflow_id`` as visibility lists them. Visibility trails a workflow's
    history by a moment on a loaded machine, so a run whose result is already in may still
    be listed running: it is listed again until none is (10 s at most)."""
    runs: list[Any] = []

    async def settled() -> bool:
        nonlocal runs
        query = f"WorkflowId = '{workflow_id}'"
        runs = [wf async for wf in harness.client.list_workflows(query)]
        return all(run.status != WorkflowExecutionStatus.RUNNING for run in runs)

    with contextlib.suppress(TimeoutError):  # a run still running is the caller's to judge
        await wait_until(settled, within=10)
    return runs


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


ASKER_PARENT = [
    {"tool_calls": [{"name": "asker", "id": "call_a", "input": {"task": "where?"}}]},
    {"text": "The asker says: {tool_result}"},
]

WHERE = [
    {"tool_calls": [{"name": "where_am_i", "id": "c_where", "input": {}}]},
    {"text": "You are in {tool_result}."},
]
"""The child asks the client where the user is, then answers in the same turn."""

WHERE_ID = agent_call_id("call_a", "c_where")


async def waiting(harness: Harness, conversation: str, ids: set[str]) -> list[dict[str, Any]]:
    """The parent's pending calls, once they are ``ids``."""
    seen: list[dict[str, Any]] = []

    async def listed() -> bool:
        seen[:] = await harness.turns.pending_tool_calls(conversation)
        return {c["tool_call_id"] for c in seen} == ids

    await wait_until(listed, within=60)
    return seen


async def parent_state(harness: Harness, conversation: str, turn: int = 1) -> dict[str, Any]:
    handle = harness.client.get_workflow_handle(turn_workflow_id(conversation, turn))
    return dict(await handle.query("state"))


async def test_a_sub_agents_client_tool_is_answered_by_the_parents_client(
    harness: Harness,
) -> None:
    start(harness)
    child_script(harness, WHERE, name="asker")
    conversation = harness.conv("agent-client")
    url = f"sqlite:///{harness.tmp / 'data' / 'chunks.db'}"
    turns = TurnsClient(harness.client, harness.task_queue, stream_url=url)
    started = await turns.start(conversation, "go", model=harness.script(ASKER_PARENT))
    [call] = await waiting(harness, conversation, {WHERE_ID})
    assert call == {
        "tool_call_id": WHERE_ID,
        "tool_name": "where_am_i",
        "waiting_for": "client",
        "agent": "call_a",
    }
    # bad answers are noted, typed, and change nothing: an unknown sub-agent, no id at all
    await turns.submit_tool_results(
        conversation,
        [{"tool_call_id": "agent:nope/c_where", "output": "Oslo"}, {"output": "no id"}],
    )

    async def noted() -> bool:
        return len((await parent_state(harness, conversation))["rejected_tool_results"]) >= 2

    await wait_until(noted, within=30)
    rejected = (await parent_state(harness, conversation))["rejected_tool_results"]
    assert any(r.startswith("UnknownToolCall: ") and "agent:nope/c_where" in r for r in rejected)
    assert any(r.startswith("malformed tool result") for r in rejected)
    assert [c["tool_call_id"] for c in await turns.pending_tool_calls(conversation)] == [WHERE_ID]
    # the real answer, sent to the parent's conversation as for the parent's own client tools
    await turns.submit_tool_result(conversation, WHERE_ID, "Lisbon")
    result = await turns.result(conversation, started)
    assert result.status == "completed", result.error
    assert result.text == "The asker says: You are in Lisbon."
    assert not result.auto_continue, "the parent's own turn goes on; nothing to continue"
    # the child went on in its own turn (no continuation turn of the child)
    child_id = child_of(conversation, 1, "call_a")
    [run] = await runs_of(harness, child_id)
    assert run.status == WorkflowExecutionStatus.COMPLETED
    assert not await runs_of(harness, turn_workflow_id(child_id.rsplit("/turn-", 1)[0], 2))
    # a Python reader of the parent's live stream saw the wait, and then its result
    events = [e async for e in turns.chunks(conversation, started.turn_number)]
    await turns.aclose()
    [wait] = [e for e in events if e.type == "tool-wait"]
    assert wait.data["tool_call_id"] == WHERE_ID and wait.data["waiting_for"] == "client"
    assert wait.data["tool_name"] == "where_am_i"
    assert wait.data["agent"]["tool_call_id"] == "call_a"
    assert wait.data["agent"]["child_tool_call_id"] == "c_where"
    results = {e.data["tool_call_id"]: e.data for e in events if e.type == "tool-result"}
    assert results[WHERE_ID]["output"] == "Lisbon"
    assert results["call_a"]["output"] == "You are in Lisbon."
    assert list(results) == [WHERE_ID, "call_a"]


APPROVALS = [
    {
        "tool_calls": [
            {"name": "wipe_disk", "id": "w_yes", "input": {}},
            {"name": "wipe_disk", "id": "w_no", "input": {}},
        ]
    },
    {"text": "{tool_results}"},
]


async def test_a_sub_agents_approvals_approved_and_denied(harness: Harness) -> None:
    start(harness)
    child_script(harness, APPROVALS, name="asker")
    conversation = harness.conv("agent-approve")
    started = await harness.turns.start(conversation, "go", model=harness.script(ASKER_PARENT))
    yes, no = agent_call_id("call_a", "w_yes"), agent_call_id("call_a", "w_no")
    calls = await waiting(harness, conversation, {yes, no})
    assert {c["waiting_for"] for c in calls} == {"approval"}
    await harness.turns.approve(conversation, yes)
    await waiting(harness, conversation, {no})  # one answered, one still waits
    assert harness.tool_runs() == [], "nothing runs before every call of the step is answered"
    await harness.turns.approve(conversation, no, approved=False, reason="not that one")
    result = await harness.turns.result(conversation, started)
    assert result.status == "completed", result.error
    assert "disk wiped" in result.text
    assert 'The user denied the call to "wipe_disk": not that one' in result.text
    assert [r["id"] for r in harness.tool_runs() if r["tool"] == "wipe_disk"] == ["w_yes"]
    # the child's transcript holds its calls, with the decisions
    child_conv = agent_conversation_id(conversation, 1, "call_a")
    outcomes = {
        p.tool_call_id: p
        for m in await (await harness.store()).messages(child_conv)
        for p in m.parts
        if isinstance(p, ToolResultPart)
    }
    assert not outcomes["w_yes"].is_error and outcomes["w_no"].is_error


async def test_a_worker_killed_while_the_sub_agent_waits_loses_nothing(harness: Harness) -> None:
    first = start(harness)
    child_script(harness, WHERE, name="asker")
    conversation = harness.conv("agent-client-kill")
    started = await harness.turns.start(conversation, "go", model=harness.script(ASKER_PARENT))
    await waiting(harness, conversation, {WHERE_ID})
    first.kill()  # the only worker: the answer arrives while no worker runs
    await harness.turns.submit_tool_result(conversation, WHERE_ID, "Faro")
    start(harness)
    result = await harness.turns.result(conversation, started)
    assert result.status == "completed", result.error
    assert result.text == "The asker says: You are in Faro."
    [run] = await runs_of(harness, child_of(conversation, 1, "call_a"))
    assert run.status == WorkflowExecutionStatus.COMPLETED


async def test_a_sub_agents_sub_agent_reaches_the_parents_client(harness: Harness) -> None:
    start(harness)
    child_script(harness, WHERE, name="asker")
    child_script(
        harness,
        [
            {"tool_calls": [{"name": "asker", "id": "call_i", "input": {"task": "where?"}}]},
            {"text": "Outer heard: {tool_result}"},
        ],
        name="outer",
    )
    parent = [
        {"tool_calls": [{"name": "outer", "id": "call_o", "input": {"task": "ask"}}]},
        {"text": "{tool_result}"},
    ]
    conversation = harness.conv("agent-nested")
    started = await harness.turns.start(conversation, "go", model=harness.script(parent))
    nested = agent_call_id("call_o", agent_call_id("call_i", "c_where"))
    [call] = await waiting(harness, conversation, {nested})
    assert call["tool_name"] == "where_am_i" and call["agent"] == "call_o"
    await harness.turns.submit_tool_result(conversation, nested, "Braga")
    result = await harness.turns.result(conversation, started)
    assert result.status == "completed", result.error
    assert result.text == "Outer heard: You are in Braga."


async def test_the_front_door_answers_a_sub_agents_client_tool(harness: Harness, door: Any) -> None:
    start(harness, TURNS_MODEL=harness.script(ASKER_PARENT))
    child_script(harness, WHERE, name="asker")
    fd = door()
    chat = harness.conv("web-agent-client")
    _, first = await post_chat(fd.url, chat_body(chat, [user_message("where am I?", "m")]))
    assert first[-2] == {"type": "finish", "finishReason": "tool-calls"}, first[-6:]
    [announced] = [c for c in first if isinstance(c, dict) and c.get("toolCallId") == WHERE_ID]
    assert announced == {
        "type": "tool-input-available",
        "toolCallId": WHERE_ID,
        "toolName": "where_am_i",
        "input": {},
    }
    agent_part = {"type": "tool-asker", "toolCallId": "call_a", "state": "output-available",
                  "input": {"task": "where?"}, "output": {"text": ""}, "preliminary": True}  # fmt: skip

    def answer(call_id: str) -> dict[str, Any]:
        return {
            "id": first[0]["messageId"],
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                agent_part,
                {"type": "tool-where_am_i", "toolCallId": call_id, "state": "output-available",
                 "input": {}, "output": "Porto"},
            ],
        }  # fmt: skip

    # a forged id under the running agent call is refused, and changes nothing
    r, _ = await post_chat(
        fd.url, chat_body(chat, [user_message("where am I?", "m"), answer("agent:call_a/x")])
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "UnknownToolCall"
    assert [c["tool_call_id"] for c in await harness.turns.pending_tool_calls(chat)] == [WHERE_ID]
    r, rest = await post_chat(
        fd.url, chat_body(chat, [user_message("where am I?", "m"), answer(WHERE_ID)])
    )
    assert r.status_code == 200
    assert rest[0] == {"type": "start", "messageId": first[0]["messageId"]}, "the same message"
    outputs = [c for c in rest if isinstance(c, dict) and c["type"] == "tool-output-available"]
    assert {"type": "tool-output-available", "toolCallId": WHERE_ID, "output": "Porto"} in outputs
    final = [c for c in outputs if c["toolCallId"] == "call_a" and not c.get("preliminary")]
    assert final == [
        {"type": "tool-output-available", "toolCallId": "call_a", "output": "You are in Porto."}
    ]
    text = "".join(c["delta"] for c in rest if isinstance(c, dict) and c["type"] == "text-delta")
    assert text == "The asker says: You are in Porto."
    assert rest[-2:] == [{"type": "finish", "finishReason": "stop"}, "[DONE]"]


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


async def record_subagent_client(harness: Harness, conversation: str) -> list[WorkflowHistory]:
    """A conversation whose sub-agent waits for the parent's client (a client tool), answered
    through the parent's conversation: the conversation's, the parent turn's and the child
    turn's histories."""
    child_script(harness, WHERE, name="asker")
    started = await harness.turns.start(conversation, "go", model=harness.script(ASKER_PARENT))
    await waiting(harness, conversation, {WHERE_ID})
    await harness.turns.submit_tool_result(conversation, WHERE_ID, "Lisbon")
    result = await harness.turns.result(conversation, started)
    assert result.status == "completed", result.error
    child = harness.client.get_workflow_handle(child_of(conversation, 1, "call_a"))
    return [
        await settled_history(harness, conversation),
        await harness.client.get_workflow_handle(result.workflow_id).fetch_history(),
        await child.fetch_history(),
    ]


async def test_fresh_subagent_histories_replay(harness: Harness) -> None:
    harness.start_worker(**SUBAGENT_WORKER)
    for history in await record_subagents(harness, harness.conv("replay-sa")):
        await replayer().replay_workflow(history)
    for history in await record_subagent_client(harness, harness.conv("replay-sac")):
        await replayer().replay_workflow(history)
