"""The front door driven by the real ``ai`` npm client, versions 6 and 7.

``tests/js/ui_client.mjs`` sends with ``DefaultChatTransport``, resumes with
``reconnectToStream`` and assembles with ``readUIMessageStream`` (``terminateOnError``), so a
protocol slip is a ``UIMessageStreamError`` here. Every test ends with the message the
client assembled equal, byte for byte (canonical JSON), to the stored reply as
``/api/chat/{id}/messages`` gives it: also after approvals and client tools, a resume, a
worker SIGKILLed or SIGTERMed mid-stream, and a provider stream retried mid-step.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import httpx
import pytest

from tests.support.harness import Harness
from tests.support.probes import wait_until
from tests.support.web import (
    FrontDoor,
    ai_client,
    canonical,
    chat_body,
    needs_node,
    post_chat,
    user_message,
)

pytestmark = needs_node

VERSIONS = [6, 7]
SLOW = [{"text": "word", "repeat": 80, "delay_ms": 40}]


async def stored_reply(url: str, chat: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as http:
        messages = (await http.get(f"{url}/api/chat/{chat}/messages")).json()
    assert messages and messages[-1]["role"] == "assistant"
    return dict(messages[-1])


def for_version(version: int) -> dict[str, str]:
    """The front door's setting for its clients' ai version (ai 6 takes neither reset-step
    nor tool-approval-response); one test sends the per-request header instead."""
    return {"TURNS_HTTP_PROTOCOL": str(version)} if version == 6 else {}


def spec(fd: FrontDoor, version: int, chat: str, **extra: Any) -> dict[str, Any]:
    return {"version": version, "api": f"{fd.url}/api/chat", "chatId": chat, **extra}


async def send(fd: FrontDoor, version: int, chat: str, messages: list[Any], **extra: Any) -> Any:
    return await ai_client(spec(fd, version, chat, action="send", messages=messages, **extra))


def assert_clean(result: dict[str, Any]) -> dict[str, Any]:
    assert result["status"] == 200 and result["error"] is None, result["error"]
    assert result["message"] is not None
    return dict(result["message"])


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_turn_assembles_to_the_stored_reply(
    harness: Harness, door: Any, version: int
) -> None:
    harness.start_worker()
    fd = door(**for_version(version))
    chat = harness.conv(f"ai{version}-basic")
    message = assert_clean(await send(fd, version, chat, [user_message("Rome?", "u1")]))
    assert message["id"] == f"{chat}/turn-1/assistant"
    assert canonical(message) == canonical(await stored_reply(fd.url, chat))


@pytest.mark.parametrize("version", VERSIONS)
async def test_an_approval_and_a_client_tool_continue_the_same_message(
    harness: Harness, door: Any, version: int
) -> None:
    model = harness.script(
        [
            {"text": "Asking.", "tool_calls": [{"name": "wipe_disk", "input": {}}]},
            {"text": "Now where?", "tool_calls": [{"name": "where_am_i", "input": {}}]},
            {"text": "Wiped ({tool_result}) and found you."},
        ]
    )
    harness.start_worker(TURNS_MODEL=model)
    fd = door(**for_version(version))
    chat = harness.conv(f"ai{version}-approve")
    user = user_message("wipe it", "u1")
    first = assert_clean(await send(fd, version, chat, [user]))
    [tool] = [p for p in first["parts"] if p["type"] == "tool-wipe_disk"]
    assert tool["state"] == "approval-requested"
    # addToolApprovalResponse, then the transport's automatic resend of the whole list
    answered = copy.deepcopy(first)
    [tool] = [p for p in answered["parts"] if p["type"] == "tool-wipe_disk"]
    tool["state"] = "approval-responded"
    tool["approval"] = {"id": tool["approval"]["id"], "approved": True}
    second = assert_clean(
        await send(
            fd, version, chat, [user, answered], messageId=answered["id"], continueFrom=answered
        )
    )
    assert second["id"] == first["id"]
    [where] = [p for p in second["parts"] if p["type"] == "tool-where_am_i"]
    assert where["state"] == "input-available", "the client tool waits for the browser"
    # addToolOutput, then the resend
    located = copy.deepcopy(second)
    [where] = [p for p in located["parts"] if p["type"] == "tool-where_am_i"]
    where["state"], where["output"] = "output-available", "Lisbon"
    final = assert_clean(
        await send(
            fd, version, chat, [user, located], messageId=located["id"], continueFrom=located
        )
    )
    assert final["id"] == first["id"]
    stored = await stored_reply(fd.url, chat)
    assert canonical(final) == canonical(stored)
    assert len(harness.tool_runs()) == 1
    # the first POST again (a retry, another tab): the whole reply from its start, through
    # the answered waits and the continuation turns, not stopping at a wait
    replay = assert_clean(await send(fd, version, chat, [user]))
    if version == 7:
        assert canonical(replay) == canonical(stored), "tool-approval-response carries the decision"
    else:  # ai 6 has no chunk for the decision: the part keeps the request's approval id only
        assert [p.get("state") for p in replay["parts"]] == [
            p.get("state") for p in stored["parts"]
        ]
        assert [p.get("text") for p in replay["parts"]] == [p.get("text") for p in stored["parts"]]
    assert len(harness.tool_runs()) == 1


@pytest.mark.parametrize("version", VERSIONS)
async def test_reconnect_to_stream_resumes_mid_reply(
    harness: Harness, door: Any, version: int
) -> None:
    harness.start_worker(TURNS_MODEL=harness.script(SLOW))
    fd = door(**for_version(version))
    chat = harness.conv(f"ai{version}-resume")
    cut = await send(fd, version, chat, [user_message("go", "u1")], abortAfterChunks=12)
    assert cut["aborted"] and cut["error"] is None
    resumed = assert_clean(await ai_client(spec(fd, version, chat, action="resume")))
    assert canonical(resumed) == canonical(await stored_reply(fd.url, chat))
    idle = await ai_client(spec(fd, version, chat, action="resume"))
    assert idle["status"] == 204 and idle["message"] is None


async def _streaming(harness: Harness, chat: str) -> bool:
    try:
        state = await harness.turns.state(chat)
    except Exception:
        return False
    return state.running is not None and state.running.turn_number is not None


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
async def test_a_worker_dying_mid_stream_leaves_the_whole_reply_once(
    harness: Harness, door: Any, version: int, how: str
) -> None:
    model = harness.script([{"text": "word", "repeat": 80, "delay_ms": 100}])  # 8 s
    first = harness.start_worker(TURNS_MODEL=model)
    fd = door()  # ai 6 says so with the per-request header here
    chat = harness.conv(f"ai{version}-{how.lower()}")
    headers = {"x-ui-message-stream-version": "6"} if version == 6 else {}
    task = asyncio.create_task(send(fd, version, chat, [user_message("go", "u1")], headers=headers))
    await wait_until(lambda: _streaming(harness, chat))
    harness.start_worker(TURNS_MODEL=model)  # ready a few seconds in: still mid-stream
    assert not task.done()
    if how == "SIGKILL":
        first.kill()
    else:
        first.stop()
    result = await asyncio.wait_for(task, 90)
    await wait_until(lambda: _done(fd, chat), within=60)
    stored = await stored_reply(fd.url, chat)
    if how == "SIGKILL":  # the step ran again on the other worker, after a reset
        types = [c["type"] for c in result["chunks"]]
        assert "reset-step" in types if version == 7 else result["error"] is not None
        # the client took the recovering part (transient: onData, not the message)
        [recovering] = [c for c in result["chunks"] if c["type"] == "data-recovering"]
        assert recovering["transient"] and recovering["data"]["reason"] == "worker_lost"
        assert not any(p["type"] == "data-recovering" for p in result["message"]["parts"])
    if result["error"] is None:
        assert canonical(result["message"]) == canonical(stored)
    else:
        # ai 6 has no reset-step: a live retry ends the reply with an error asking for a
        # resume, and the resume replays without the discarded attempt
        assert version == 6 and "resume" in result["error"]["message"]
        await wait_until(lambda: _done(fd, chat), within=60)
        replay = await send(fd, version, chat, [user_message("go", "u1")], headers=headers)
        assert canonical(assert_clean(replay)) == canonical(await stored_reply(fd.url, chat))
    text = "".join(p["text"] for p in stored["parts"] if p["type"] == "text")
    assert text == " ".join(["word"] * 80), "the whole reply, once"


async def _done(fd: FrontDoor, chat: str) -> bool:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.get(f"{fd.url}/api/chat/{chat}/messages")
    return len(r.json()) == 2


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_retried_provider_stream_never_reaches_the_final_message(
    harness: Harness, door: Any, version: int
) -> None:
    model = harness.script(
        [
            {
                "text": "steady words",
                "repeat": 20,
                "delay_ms": 10,
                "attempts": 1,
                "error": {
                    "message": "overloaded",
                    "status": 529,
                    "kind": "transient",
                    "after_chunks": 6,
                },
            }
        ]
    )
    harness.start_worker(TURNS_MODEL=model)
    fd = door(**for_version(version))
    chat = harness.conv(f"ai{version}-retry")
    headers = {"x-ui-message-stream-version": "6"} if version == 6 else {}
    result = await send(fd, version, chat, [user_message("go", "u1")], headers=headers)
    await wait_until(lambda: _done(fd, chat), within=60)
    stored = await stored_reply(fd.url, chat)
    if version == 7:
        types = [c["type"] for c in result["chunks"]]
        assert "reset-step" in types
        assert canonical(assert_clean(result)) == canonical(stored)
    else:
        assert result["error"] is not None and "resume" in result["error"]["message"]
        replay = await send(fd, version, chat, [user_message("go", "u1")], headers=headers)
        assert canonical(assert_clean(replay)) == canonical(stored), "the same POST replays"


@pytest.mark.parametrize("version", VERSIONS)
async def test_regenerate_replaces_the_reply_and_keeps_the_old_one_stored(
    harness: Harness, door: Any, version: int
) -> None:
    harness.start_worker(TURNS_MODEL=harness.script([{"text": "seen {request.message_count}"}]))
    fd = door(**for_version(version))
    chat = harness.conv(f"ai{version}-regen")
    user = user_message("hello", "u1")
    first = assert_clean(await send(fd, version, chat, [user]))
    # chat.regenerate(): the reply leaves the list, and its id is the messageId
    again = assert_clean(
        await send(fd, version, chat, [user], trigger="regenerate-message", messageId=first["id"])
    )
    assert again["id"] != first["id"]
    assert canonical(again) == canonical(await stored_reply(fd.url, chat))
    text = "".join(p["text"] for p in again["parts"] if p["type"] == "text")
    assert text == "seen 1", "the old reply is left out of the new turn's context"
    async with httpx.AsyncClient(timeout=30) as http:
        listed = (await http.get(f"{fd.url}/api/chat/{chat}/messages")).json()
    assert [m["id"] for m in listed] == ["u1", again["id"]]
    kept = await (await harness.store()).messages(chat, superseded=True)
    assert first["id"] in [m.id for m in kept], "the old reply stays in the store"


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_sub_agents_approval_reaches_the_browser(
    harness: Harness, door: Any, version: int
) -> None:
    """A sub-agent's approval (``tests/support/agent_tools.py``'s ``asker``) is a part of
    the parent's reply, under ``agent:<agent call>/<child call>``, which the browser
    approves as any other; the reply goes on in the same message."""
    parent = [
        {"tool_calls": [{"name": "asker", "id": "call_a", "input": {"task": "wipe?"}}]},
        {"text": "The asker says: {tool_result}"},
    ]
    child = [
        {"tool_calls": [{"name": "wipe_disk", "id": "w1", "input": {}}]},
        {"text": "Done: {tool_result}."},
    ]
    (harness.tmp / "asker.json").write_text(json.dumps(child))
    harness.start_worker(
        TURNS_MODEL=harness.script(parent),
        TURNS_TOOLS="tests.support.tools,tests.support.agent_tools",
    )
    fd = door(**for_version(version))
    chat = harness.conv(f"ai{version}-agent-approve")
    user = user_message("wipe it", "u1")
    first = assert_clean(await send(fd, version, chat, [user]))
    [tool] = [p for p in first["parts"] if p["type"] == "tool-wipe_disk"]
    assert tool["toolCallId"] == "agent:call_a/w1"
    assert tool["state"] == "approval-requested"
    answered = copy.deepcopy(first)
    [tool] = [p for p in answered["parts"] if p["type"] == "tool-wipe_disk"]
    tool["state"] = "approval-responded"
    tool["approval"] = {"id": tool["approval"]["id"], "approved": True}
    final = assert_clean(
        await send(
            fd, version, chat, [user, answered], messageId=answered["id"], continueFrom=answered
        )
    )
    assert final["id"] == first["id"]
    [tool] = [p for p in final["parts"] if p["type"] == "tool-wipe_disk"]
    assert tool["state"] == "output-available" and tool["output"] == "disk wiped"
    [agent] = [p for p in final["parts"] if p["type"] == "tool-asker"]
    assert agent["state"] == "output-available" and agent["output"] == "Done: disk wiped."
    texts = [p["text"] for p in final["parts"] if p["type"] == "text"]
    assert texts == ["The asker says: Done: disk wiped."]
    assert [r["id"] for r in harness.tool_runs()] == ["w1"]
    # the stored reply is the same message without the sub-agent's own call (docs/web.md)
    own = {**final, "parts": [p for p in final["parts"] if p["type"] != "tool-wipe_disk"]}
    assert canonical(own) == canonical(await stored_reply(fd.url, chat))


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_queued_message_assembles_to_its_stored_reply(
    harness: Harness, door: Any, version: int
) -> None:
    """A message sent while another tab's reply runs is answered at once with a ``start``
    without an id and a transient ``data-queued``; the client takes both, then the reply."""
    harness.start_worker(
        TURNS_MODEL=harness.script(
            {"turns": [[{"text": "word", "repeat": 60, "delay_ms": 60}], [{"text": "Second."}]]}
        )
    )
    fd = door(**for_version(version))
    chat = harness.conv(f"ai{version}-queued")
    first = asyncio.create_task(post_chat(fd.url, chat_body(chat, [user_message("one", "u1")])))
    await wait_until(lambda: _streaming(harness, chat))
    result = await send(fd, version, chat, [user_message("two", "u2")])
    message = assert_clean(result)
    assert [c["type"] for c in result["chunks"][:3]] == ["start", "data-queued", "start"]
    assert message["id"] == f"{chat}/turn-2/assistant"
    assert canonical(message) == canonical(await stored_reply(fd.url, chat))
    response, chunks = await first
    assert response.status_code == 200 and chunks[-1] == "[DONE]"
