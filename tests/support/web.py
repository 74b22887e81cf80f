"""The browser front door in tests: ``turns serve`` as a real process, an SSE reader, and the
real ``ai`` npm client (``tests/js/ui_client.mjs``) driving it."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import pytest

from tests.support.harness import ROOT, Harness

JS = ROOT / "tests" / "js"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FrontDoor:
    """``turns serve`` on a free port, with the harness's task queue, store and streams."""

    def __init__(self, harness: Harness, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = harness.tmp / f"serve-{self.port}.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from durable_turns.cli import main; main()",
                "serve",
                "--port",
                str(self.port),
            ],
            cwd=ROOT,
            env=harness.env(**env),
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
        )
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            self._log.flush()
            if b"front door on" in line:
                self._ready.set()

    def wait_ready(self, timeout: float = 30) -> FrontDoor:
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"front door not ready:\n{self.log_tail()}")
        while time.monotonic() < deadline:  # printed before uvicorn binds: wait for the port
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"front door not listening:\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        self._log.flush()
        return self.log_path.read_bytes()[-n:].decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


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
    async with (
        httpx.AsyncClient(timeout=60) as http,
        http.stream("POST", f"{url}/api/chat", json=body, headers=headers) as response,
    ):
        if response.status_code != 200:
            await response.aread()
            return response, []
        return response, await sse_chunks(response)


def node_available() -> bool:
    return shutil.which("node") is not None and (JS / "node_modules" / "ai7").exists()


needs_node = pytest.mark.skipif(
    not node_available(), reason="the ai npm packages are not installed (npm ci --prefix tests/js)"
)


async def ai_client(spec: dict[str, Any], within: float = 90) -> dict[str, Any]:
    """Run the real ``ai`` client (``tests/js/ui_client.mjs``) on one request."""
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(JS / "ui_client.mjs"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=JS,
    )
    out, err = await asyncio.wait_for(proc.communicate(json.dumps(spec).encode()), within)
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"ui_client.mjs failed ({proc.returncode}): {err.decode()[-3000:]}")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


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
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(JS / "browser.mjs"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=JS,
    )
    out, err = await asyncio.wait_for(proc.communicate(json.dumps(spec).encode()), within)
    if not out.strip():
        raise RuntimeError(
            f"browser.mjs printed nothing ({proc.returncode}): {err.decode()[-3000:]}"
        )
    return dict(json.loads(out.decode().strip().splitlines()[-1]))
