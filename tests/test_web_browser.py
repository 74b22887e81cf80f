"""The chat page in real headless Chromium (Debian's), against a real worker and front door:
type and watch it stream, reload mid-stream and see it resume, approve a tool, Stop,
Regenerate, and a worker killed mid-stream leaving the whole reply once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from tests.support.harness import Harness
from tests.support.probes import wait_until
from tests.support.web import (
    FrontDoor,
    browser,
    chat_body,
    needs_chromium,
    user_message,
)

pytestmark = needs_chromium

SLOW = [{"text": "word", "repeat": 60, "delay_ms": 60}]


async def stored(fd: FrontDoor, chat: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=30) as http:
        return list((await http.get(f"{fd.url}/api/chat/{chat}/messages")).json())


def text(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def page_text(snapshot: dict[str, Any], role: str = "assistant") -> list[str]:
    return [m["text"] for m in snapshot["messages"] if m["role"] == role]


def assert_ok(result: dict[str, Any]) -> dict[str, Any]:
    assert result["ok"], (result.get("error"), result.get("failedStep"), result.get("final"))
    assert result["console"] == [], result["console"]
    return result


async def test_type_stream_reload_and_resume(harness: Harness, door: Any) -> None:
    harness.start_worker(TURNS_MODEL=harness.script(SLOW))
    fd = door()
    chat = harness.conv("page-resume")
    result = assert_ok(
        await browser(
            {
                "url": f"{fd.url}/?chat={chat}",
                "timeoutMs": 60000,
                "steps": [
                    {"do": "type", "text": "stream please"},
                    {"do": "send"},
                    {"do": "waitStatus", "is": "streaming"},
                    {"do": "waitText", "contains": "word word word", "role": "assistant"},
                    {"do": "snapshot"},
                    {"do": "reload"},  # mid-stream: the page resumes from the reply's start
                    {"do": "waitText", "contains": "stream please", "role": "user"},
                    {"do": "waitStatus", "is": "ready"},
                    {"do": "snapshot"},
                ],
            }
        )
    )
    before, after = result["snapshots"]
    messages = await stored(fd, chat)
    assert text(messages[-1]) == " ".join(["word"] * 60)
    assert 0 < len(page_text(before)[-1]) < len(text(messages[-1])), "mid-stream at the reload"
    assert page_text(after) == [text(messages[-1])], "resumed: the whole reply, once"


async def test_approve_a_tool_from_the_page(harness: Harness, door: Any) -> None:
    model = harness.script(
        [
            {"text": "I need your go-ahead.", "tool_calls": [{"name": "wipe_disk", "input": {}}]},
            {"text": "Result: {tool_result}."},
        ]
    )
    harness.start_worker(TURNS_MODEL=model)
    fd = door()
    chat = harness.conv("page-approve")
    result = assert_ok(
        await browser(
            {
                "url": f"{fd.url}/?chat={chat}",
                "timeoutMs": 60000,
                "steps": [
                    {"do": "type", "text": "wipe it"},
                    {"do": "send"},
                    {"do": "waitTool", "state": "approval-requested"},
                    {"do": "reload"},  # the wait survives a reload: the buttons come back
                    {"do": "waitTool", "state": "approval-requested"},
                    {"do": "click", "testid": "approve"},
                    {"do": "waitText", "contains": "Result: disk wiped.", "role": "assistant"},
                    {"do": "waitStatus", "is": "ready"},
                    {"do": "snapshot"},
                ],
            }
        )
    )
    [snapshot] = result["snapshots"]
    messages = await stored(fd, chat)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert page_text(snapshot) == [text(messages[-1])]
    [tool] = snapshot["messages"][-1]["tools"]
    assert tool["state"] == "output-available"
    assert len(harness.tool_runs()) == 1


async def test_stop_and_regenerate(harness: Harness, door: Any) -> None:
    harness.start_worker(TURNS_MODEL=harness.script(SLOW), TURNS_HEARTBEAT_TIMEOUT_S="30")
    fd = door()
    chat = harness.conv("page-stop")
    result = assert_ok(
        await browser(
            {
                "url": f"{fd.url}/?chat={chat}",
                "timeoutMs": 60000,
                "steps": [
                    {"do": "type", "text": "go"},
                    {"do": "send"},
                    {"do": "waitText", "contains": "word word", "role": "assistant"},
                    {"do": "click", "testid": "stop"},
                    {"do": "waitStatus", "is": "ready"},
                    {"do": "snapshot"},
                    {"do": "reload"},  # the stopped reply still says so
                    {"do": "waitTestid", "testid": "stopped"},
                    {"do": "snapshot"},
                    {"do": "click", "testid": "regenerate"},
                    {"do": "waitStatus", "is": "streaming"},
                    {"do": "waitStatus", "is": "ready"},
                    {"do": "snapshot"},
                ],
            }
        )
    )
    stopped, reloaded, regenerated = result["snapshots"]
    assert stopped["messages"][-1]["stopped"] and reloaded["messages"][-1]["stopped"]
    assert page_text(reloaded) == page_text(stopped)
    assert not regenerated["messages"][-1]["stopped"]
    await wait_until(lambda: _idle(harness, chat))
    messages = await stored(fd, chat)
    assert len(messages) == 2, "the stopped reply is superseded by the regenerated one"
    assert text(messages[-1]) == " ".join(["word"] * 60)
    assert 0 < len(page_text(stopped)[-1]) < len(text(messages[-1])), "Stop kept a partial"
    assert page_text(regenerated) == [text(messages[-1])]
    assert regenerated["messages"][-1]["id"] == messages[-1]["id"] != stopped["messages"][-1]["id"]
    kept = await (await harness.store()).messages(chat, superseded=True)
    assert stopped["messages"][-1]["id"] in [m.id for m in kept]


async def _idle(harness: Harness, chat: str) -> bool:
    state = await harness.turns.state(chat)
    return state.running is None and not state.queue


async def test_a_worker_killed_mid_stream_shows_the_whole_reply_once(
    harness: Harness, door: Any
) -> None:
    model = harness.script([{"text": "word", "repeat": 80, "delay_ms": 100}])
    first = harness.start_worker(TURNS_MODEL=model)
    fd = door()
    chat = harness.conv("page-kill")
    run = asyncio.create_task(
        browser(
            {
                "url": f"{fd.url}/?chat={chat}",
                "timeoutMs": 90000,
                "steps": [
                    {"do": "type", "text": "go"},
                    {"do": "send"},
                    {"do": "waitText", "contains": "word word", "role": "assistant"},
                    {"do": "snapshot"},
                    {"do": "waitStatus", "is": "ready"},
                    {"do": "snapshot"},
                ],
            },
            within=150,
        )
    )
    await wait_until(lambda: _streaming(harness, chat))
    harness.start_worker(TURNS_MODEL=model)
    first.kill()  # the step runs again on the other worker
    result = assert_ok(await run)
    during, done = result["snapshots"]
    messages = await stored(fd, chat)
    assert text(messages[-1]) == " ".join(["word"] * 80)
    assert len(page_text(during)[-1]) < len(text(messages[-1])), "mid-stream"
    assert page_text(done) == [text(messages[-1])], "the whole reply, once"


async def _streaming(harness: Harness, chat: str) -> bool:
    try:
        state = await harness.turns.state(chat)
    except Exception:
        return False
    return state.running is not None and state.running.turn_number is not None


async def test_a_message_queued_behind_another_tabs_reply(harness: Harness, door: Any) -> None:
    """The page was open before another tab's reply began: its message waits its turn,
    the page says so at once ("queued"), then streams its own reply, and shows no empty
    message for the queued ``start`` that has no id yet."""
    model = {"turns": [[{"text": "word", "repeat": 80, "delay_ms": 60}], [{"text": "Second."}]]}
    harness.start_worker(TURNS_MODEL=harness.script(model))
    fd = door()
    chat = harness.conv("page-queued")
    other = json.dumps(chat_body(chat, [user_message("one", "m1")]))
    result = assert_ok(
        await browser(
            {
                "url": f"{fd.url}/?chat={chat}",
                "timeoutMs": 60000,
                "steps": [
                    {"do": "waitStatus", "is": "ready"},
                    {"do": "type", "text": "two"},
                    {  # another tab's message: its reply runs for 5 s
                        "do": "evaluate",
                        "js": f"fetch('/api/chat', {{method: 'POST', body: {json.dumps(other)},"
                        " headers: {'content-type': 'application/json'}}).then((r) => r.text())",
                    },
                    {"do": "sleep", "ms": 2000},
                    {"do": "send"},
                    {"do": "waitStatus", "is": "queued"},
                    {"do": "snapshot"},
                    {"do": "waitText", "contains": "Second.", "role": "assistant"},
                    {"do": "waitStatus", "is": "ready"},
                    {"do": "snapshot"},
                ],
            }
        )
    )
    queued, done = result["snapshots"]
    assert [m["role"] for m in queued["messages"]] == ["user"], "no empty reply while queued"
    assert [(m["role"], m["text"]) for m in done["messages"]] == [
        ("user", "two"),
        ("assistant", "Second."),
    ]
    assert done["messages"][-1]["id"] == f"{chat}/turn-2/assistant"
    stored_replies = [text(m) for m in await stored(fd, chat) if m["role"] == "assistant"]
    assert stored_replies == [" ".join(["word"] * 80), "Second."]
