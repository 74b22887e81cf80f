"""No worker at all, and a door that shuts down: what the browser, ``state`` and the health
check say.

A chat sent while no worker polls its task queue is answered at once with a transient
``data-waiting`` chunk (the page shows "waiting for a worker"), ``TurnsClient.state`` raises
``NoWorker`` instead of waiting out its query, ``/api/health`` is 503 and says why; the turn
runs as soon as a worker comes. ``turns serve`` on SIGTERM ends its open streams with
``data-resume`` and exits; another door resumes the reply whole. Real dev server, real
worker and door processes; how soon the status shows is measured in ``bench/``, not here.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from durable_turns.errors import NoWorker
from tests.support.harness import Harness
from tests.support.probes import wait_until
from tests.support.web import browser, chat_body, needs_chromium, sse_chunks, user_message

WORDS = 120
SLOW = [{"text": "word", "repeat": WORDS, "delay_ms": 60}]


def text_of(chunks: list[Any]) -> str:
    return "".join(c["delta"] for c in chunks if isinstance(c, dict) and c["type"] == "text-delta")


async def read_stream(
    response: httpx.Response, chunks: list[Any], seen: dict[str, asyncio.Event]
) -> None:
    """Read a UI message stream into ``chunks``, setting ``seen[type]`` as chunks come."""
    async for line in response.aiter_lines():
        if not line.startswith("data: "):
            continue
        payload = line[len("data: ") :]
        chunk = payload if payload == "[DONE]" else json.loads(payload)
        chunks.append(chunk)
        kind = chunk["type"] if isinstance(chunk, dict) else chunk
        if kind in seen:
            seen[kind].set()


async def completed(harness: Harness, chat: str) -> bool:
    """The conversation has recorded its turn as completed (a moment after the reply ends)."""
    state = await harness.turns.state(chat)
    return state.running is None and [r.status for r in state.recent] == ["completed"]


async def test_a_chat_without_a_worker_says_so_and_runs_when_one_comes(
    harness: Harness, door: Any
) -> None:
    fd = door()
    chat = harness.conv("web-no-worker")
    async with httpx.AsyncClient(timeout=120) as http:
        health = await http.get(f"{fd.url}/api/health")
        assert health.status_code == 503, health.text
        said = health.json()
        assert said["ok"] is False and said["temporal"]["ok"] is True
        assert said["workers"] == {
            "ok": False,
            "task_queue": harness.task_queue,
            "workflow_pollers": 0,
            "activity_pollers": 0,
        }

        chunks: list[Any] = []
        seen = {"data-waiting": asyncio.Event(), "text-delta": asyncio.Event()}

        async def post() -> int:
            body = chat_body(chat, [user_message("hello", "m1")])
            async with http.stream("POST", f"{fd.url}/api/chat", json=body) as r:
                if r.status_code == 200:
                    await read_stream(r, chunks, seen)
                return r.status_code

        posted = asyncio.create_task(post())
        await asyncio.wait_for(seen["data-waiting"].wait(), 60)
        waiting = next(c for c in chunks if isinstance(c, dict) and c["type"] == "data-waiting")
        assert waiting["transient"] is True and waiting["data"]["waiting_for"] == "worker"
        assert waiting["data"]["message"].startswith("waiting for a worker: no worker polls")
        assert [c["type"] for c in chunks[:2]] == ["start", "data-waiting"]
        assert "messageId" not in chunks[0], "the reply's id is not known before it starts"
        assert not seen["text-delta"].is_set()

        # the Python client says the same, without waiting out its query
        with pytest.raises(NoWorker, match=r"^waiting for a worker: no worker polls"):
            await harness.turns.state(chat)

        # a reload meanwhile: the page's resume says so too (no turn to follow yet)
        r = await http.get(f"{fd.url}/api/chat/{chat}/stream")
        assert r.status_code == 503 and r.json()["error"]["type"] == "NoWorker", r.text

        await asyncio.to_thread(harness.start_worker)
        assert await asyncio.wait_for(posted, 120) == 200

        async def healthy() -> bool:  # (the door reuses its look at the workers for 1 s)
            return (await http.get(f"{fd.url}/api/health")).status_code == 200

        await wait_until(healthy)
        said = (await http.get(f"{fd.url}/api/health")).json()
        assert said["ok"] is True and said["workers"]["workflow_pollers"] >= 1, said

    kinds = [c["type"] if isinstance(c, dict) else c for c in chunks]
    assert kinds[-2:] == ["finish", "[DONE]"], kinds
    starts = [c for c in chunks if isinstance(c, dict) and c["type"] == "start"]
    assert starts[-1]["messageId"] == f"{chat}/turn-1/assistant"
    assert text_of(chunks), "the reply streamed once a worker came"
    await wait_until(lambda: completed(harness, chat))


async def test_serve_on_sigterm_ends_its_streams_and_another_door_resumes(
    harness: Harness, door: Any
) -> None:
    await asyncio.to_thread(harness.start_worker, TURNS_MODEL=harness.script(SLOW))
    first = door(TURNS_HTTP_SHUTDOWN_GRACE_S="5")
    chat = harness.conv("web-sigterm")
    chunks: list[Any] = []
    seen = {"text-delta": asyncio.Event(), "data-resume": asyncio.Event()}
    async with httpx.AsyncClient(timeout=120) as http:
        body = chat_body(chat, [user_message("go", "m1")])
        async with http.stream("POST", f"{first.url}/api/chat", json=body) as r:
            assert r.status_code == 200
            reading = asyncio.create_task(read_stream(r, chunks, seen))
            await asyncio.wait_for(seen["text-delta"].wait(), 60)
            first.terminate()  # SIGTERM, as a deploy sends it
            await asyncio.wait_for(reading, 60)  # the door ends the response: no hang
        code = await asyncio.to_thread(first.proc.wait, 60)
    kinds = [c["type"] if isinstance(c, dict) else c for c in chunks]
    assert kinds[-1] == "data-resume" and "finish" not in kinds, kinds
    assert chunks[-1]["transient"] is True
    assert code in (0, -15), first.log_tail()  # (uvicorn re-raises the SIGTERM it caught)

    # the browser resumes from another door: the whole reply, from its start
    second = door()
    async with (
        httpx.AsyncClient(timeout=120) as http,
        http.stream("GET", f"{second.url}/api/chat/{chat}/stream") as r,
    ):
        assert r.status_code == 200
        resumed = await sse_chunks(r)
    assert resumed[-1] == "[DONE]" and resumed[-2]["type"] == "finish"
    assert text_of(resumed) == " ".join(["word"] * WORDS)
    assert text_of(resumed).startswith(text_of(chunks)), "nothing the user saw changes"


@needs_chromium
async def test_the_page_says_waiting_for_a_worker_then_streams(harness: Harness, door: Any) -> None:
    """Old page: "streaming" and a Stop button for as long as no worker came."""
    fd = door()
    chat = harness.conv("page-no-worker")
    shown = asyncio.Event()

    async def signal(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")  # the page says it shows the status
        writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        shown.set()

    listener = await asyncio.start_server(signal, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    page = asyncio.create_task(
        browser(
            {
                "url": f"{fd.url}/?chat={chat}",
                "timeoutMs": 90000,
                "steps": [
                    {"do": "type", "text": "anyone there?"},
                    {"do": "send"},
                    {"do": "waitStatus", "is": "waiting for a worker"},
                    {"do": "snapshot"},
                    {
                        "do": "evaluate",
                        "js": f"fetch('http://127.0.0.1:{port}/', {{mode: 'no-cors'}})",
                    },
                    {"do": "waitStatus", "is": "ready"},
                    {"do": "snapshot"},
                ],
            },
            within=180,
        )
    )
    try:
        await asyncio.wait_for(shown.wait(), 120)
        await asyncio.to_thread(harness.start_worker)
        result = await page
    finally:
        listener.close()
        page.cancel()
    assert result["ok"], (result.get("error"), result.get("failedStep"), result.get("final"))
    assert result["console"] == [], result["console"]
    waiting, done = result["snapshots"]
    assert waiting["status"] == "waiting for a worker"
    replies = [m for m in done["messages"] if m["role"] == "assistant"]
    assert len(replies) == 1 and replies[0]["text"] and not replies[0]["errors"], done


async def test_a_reply_whose_only_worker_died_says_waiting_then_finishes(
    harness: Harness, door: Any
) -> None:
    """The worker's poller is still listed (for 80 s): the door sees the turn's retried
    step waiting unstarted instead."""
    worker = await asyncio.to_thread(harness.start_worker, TURNS_MODEL=harness.script(SLOW))
    fd = door()
    chat = harness.conv("web-worker-died")
    chunks: list[Any] = []
    seen = {"text-delta": asyncio.Event(), "data-waiting": asyncio.Event()}
    async with httpx.AsyncClient(timeout=180) as http:
        body = chat_body(chat, [user_message("go", "m1")])
        async with http.stream("POST", f"{fd.url}/api/chat", json=body) as r:
            assert r.status_code == 200
            reading = asyncio.create_task(read_stream(r, chunks, seen))
            await asyncio.wait_for(seen["text-delta"].wait(), 60)
            worker.kill()
            await asyncio.wait_for(seen["data-waiting"].wait(), 90)
            waiting = next(c for c in chunks if isinstance(c, dict) and c["type"] == "data-waiting")
            assert waiting["data"]["message"].startswith("waiting for a worker: turn "), waiting
            await asyncio.to_thread(harness.start_worker, TURNS_MODEL=harness.script(SLOW))
            await asyncio.wait_for(reading, 150)
    kinds = [c["type"] if isinstance(c, dict) else c for c in chunks]
    assert kinds[-2:] == ["finish", "[DONE]"], kinds[-6:]
    await wait_until(lambda: completed(harness, chat))
