"""The browser front door in tests: ``turns serve`` as a real process, an SSE reader, and the
real ``ai`` npm client (``tests/js/ui_client.mjs``) driving it."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.harness import ROOT, Harness, WorkerProcess

JS = ROOT / "tests" / "js"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FrontDoor(WorkerProcess):
    """``turns serve`` on a free port, with the harness's task queue, store and streams."""

    started: list[FrontDoor] = []  # noqa: RUF012 (for a failing test's report)

    def __init__(self, harness: Harness, **env: str) -> None:
        FrontDoor.started = [*FrontDoor.started[-7:], self]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(
            harness.env(**env),
            harness.tmp / f"serve-{self.port}.log",
            ["-c", "from durable_turns.cli import main; main()", "serve", "--port", str(self.port)],
            marker=b"front door on",  # printed once it listens
        )

    def wait_ready(self, timeout: float = 30) -> FrontDoor:  # type: ignore[override]
        super().wait_ready(timeout)
        return self


def user_message(text: str, message_id: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def chat_body(chat_id: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": chat_id, "messages": messages, "trigger": "submit-message", **extra}


async def sse_chunks(response: httpx.Response) -> list[Any]:
    """The chunks of a UI message stream response (``[DONE]`` as the string)."""
    chunks: list[Any] = []
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            chunks.append(payload if payload == "[DONE]" else json.loads(payload))
    return chunks


async def post_chat(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[httpx.Response, list[Any]]:
    chunks: list[Any] = []
    try:
        async with (
            httpx.AsyncClient(timeout=60) as http,
            http.stream("POST", f"{url}/api/chat", json=body, headers=headers) as response,
        ):
            if response.status_code != 200:
                await response.aread()
                return response, []
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    payload = line[len("data: ") :]
                    chunks.append(payload if payload == "[DONE]" else json.loads(payload))
            return response, chunks
    except httpx.TimeoutException as e:  # say what had come, and what the door logged
        logs = "".join(d.log_tail() for d in FrontDoor.started if d.url == url)
        raise AssertionError(
            f"no more of the reply for 60 s; chunks so far: {chunks[-12:]}\nfront door log:\n{logs}"
        ) from e


def node_available() -> bool:
    return shutil.which("node") is not None and (JS / "node_modules" / "ai7").exists()


needs_node = pytest.mark.skipif(
    not node_available(), reason="the ai npm packages are not installed (npm ci --prefix tests/js)"
)


async def node(script: str, spec: dict[str, Any], within: float) -> dict[str, Any]:
    """Run ``tests/js/<script>`` on one JSON spec (stdin); its one JSON line (stdout)."""
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(JS / script),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=JS,
    )
    out, err = await asyncio.wait_for(proc.communicate(json.dumps(spec).encode()), within)
    if not out.strip():
        raise RuntimeError(f"{script} printed nothing ({proc.returncode}): {err.decode()[-3000:]}")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


async def ai_client(spec: dict[str, Any], within: float = 90) -> dict[str, Any]:
    """The real ``ai`` client (``tests/js/ui_client.mjs``) on one request."""
    return await node("ui_client.mjs", spec, within)


def canonical(value: Any) -> str:
    """JSON with sorted keys: the byte-for-byte comparison of two messages."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def chromium_available() -> bool:
    return (
        shutil.which("chromium") is not None and (JS / "node_modules" / "playwright-core").exists()
    )


needs_chromium = pytest.mark.skipif(
    not chromium_available(), reason="Debian's chromium or playwright-core is not installed"
)


async def browser(spec: dict[str, Any], within: float = 120) -> dict[str, Any]:
    """Drive the chat page in headless Chromium (``tests/js/browser.mjs``)."""
    return await node("browser.mjs", spec, within)


@pytest.fixture
def door(harness: Harness) -> Iterator[Callable[..., FrontDoor]]:
    """``door(**env)`` starts a front door for the test (stopped after it)."""
    doors: list[FrontDoor] = []

    def start(**env: str) -> FrontDoor:
        d = FrontDoor(harness, **env).wait_ready()
        doors.append(d)
        return d

    yield start
    for d in doors:
        d.stop()
