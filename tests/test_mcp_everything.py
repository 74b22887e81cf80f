"""The protocol's reference server, ``@modelcontextprotocol/server-everything`` (pinned in
tests/js, a server no one here wrote), through real worker processes and real turns: over
stdio and over streamable HTTP, text, structured content, an image, an embedded resource, an
error result, the environment it is given, and an HTTP server that restarts under a session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from durable_turns.messages import TextPart
from tests.support.harness import ROOT, Harness
from tests.support.probes import free_port
from tests.test_mcp import calls, results

PACKAGE = ROOT / "tests" / "js" / "node_modules" / "@modelcontextprotocol" / "server-everything"
NODE = shutil.which("node")


def entry_point() -> Path:
    """The package's ``bin`` (``mcp-server-everything``), as its package.json names it."""
    manifest = json.loads((PACKAGE / "package.json").read_text())
    return PACKAGE / manifest["bin"]["mcp-server-everything"]


pytestmark = [
    pytest.mark.skipif(
        NODE is None or not (PACKAGE / "package.json").exists(),
        reason="node or the npm packages are not installed (npm ci --prefix tests/js)",
    ),
    pytest.mark.timeout(90),
]


def config(harness: Harness, entry: dict[str, Any]) -> str:
    path = harness.tmp / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"e": entry}}))
    return str(path)


def stdio_entry() -> dict[str, Any]:
    return {"command": NODE, "args": [str(entry_point()), "stdio"], "env": {"GIVEN": "yes"}}


async def test_everything_over_stdio(harness: Harness) -> None:
    harness.start_worker(
        TURNS_MCP_CONFIG=config(harness, stdio_entry()), WORKER_SECRET="worker-only-value"
    )
    conversation = harness.conv("everything-stdio")
    steps = calls(
        ("mcp__e__echo", {"message": "hi"}),
        ("mcp__e__get-sum", {"a": 2, "b": 3}),
        ("mcp__e__get-structured-content", {"location": "Chicago"}),
        ("mcp__e__get-tiny-image", {}),
        ("mcp__e__get-resource-reference", {"resourceType": "Text", "resourceId": 1}),
        ("mcp__e__get-sum", {"a": "two"}),
        ("mcp__e__get-env", {}),
    )
    steps[0]["text"] = "{request.tools}"
    steps[-1]["text"] = "last: {tool_result}"
    result = await harness.send(conversation, "go", model=harness.script(steps))
    assert result.status == "completed"
    echo, total, weather, image, resource, wrong, env = await results(harness, conversation)
    assert (echo.output, echo.is_error) == ("Echo: hi", False)
    assert (total.output, total.is_error) == ("The sum of 2 and 3 is 5.", False)
    # structuredContent wins over its text copy
    assert weather.output == {
        "temperature": 36,
        "conditions": "Light rain / drizzle",
        "humidity": 82,
    }
    assert not image.is_error and isinstance(image.output, list)
    [picture] = [p for p in image.output if p["type"] == "image"]
    assert picture["mime_type"] == "image/png" and picture["bytes"] > 1000, "a summary, no bytes"
    assert len(json.dumps(image.output)) < 500
    assert not resource.is_error
    [embedded] = [p for p in resource.output if p["type"] == "resource"]
    assert embedded["uri"] == "demo://resource/dynamic/text/1"
    assert embedded["text"].startswith("Resource 1: This is a plaintext resource")
    assert wrong.is_error and "Input validation error" in str(wrong.output)
    # the server runs with the SDK's minimal environment and its own env, never the worker's
    seen = json.loads(env.output)
    assert seen["GIVEN"] == "yes" and "PATH" in seen
    assert "WORKER_SECRET" not in seen and "TEMPORAL_ADDRESS" not in seen
    assert "worker-only-value" not in json.dumps(seen)
    # the model is offered every tool of the server, in name order, after the worker's own
    messages = await (await harness.store()).messages(conversation)
    texts = [p.text for m in messages[1:] for p in m.parts if isinstance(p, TextPart) and p.text]
    offered = json.loads(texts[0])
    names = [n for n in offered if n.startswith("mcp__e__")]
    assert names == sorted(names) and offered[-len(names) :] == names
    assert {"mcp__e__echo", "mcp__e__get-sum", "mcp__e__get-tiny-image"} <= set(names)


class EverythingHttp:
    """``node …/index.js streamableHttp`` on a free port of 127.0.0.1."""

    def __init__(self, tmp: Path, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.log = open(tmp / f"everything-http-{time.monotonic_ns()}.log", "ab")
        assert NODE is not None
        self.proc = subprocess.Popen(
            [NODE, str(entry_point()), "streamableHttp"],
            stdout=self.log,
            stderr=self.log,
            stdin=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PORT": str(port)},
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server-everything exited ({self.proc.returncode})")
            try:
                httpx.get(self.url, timeout=1)  # 400 without a session: it is up
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("server-everything (streamable HTTP) did not start")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


async def test_everything_over_streamable_http_and_a_restart_under_the_session(
    harness: Harness,
) -> None:
    port = free_port()
    server = EverythingHttp(harness.tmp, port)
    try:
        entry = {"url": server.url, "connect_timeout_s": 10}
        harness.start_worker(TURNS_MCP_CONFIG=config(harness, entry))
        first = harness.conv("everything-http-1")
        model = harness.script(
            calls(
                ("mcp__e__echo", {"message": "over http"}),
                ("mcp__e__get-structured-content", {"location": "New York"}),
            )
        )
        assert (await harness.send(first, "go", model=model)).status == "completed"
        echo, weather = await results(harness, first)
        assert (echo.output, echo.is_error) == ("Echo: over http", False)
        assert weather.output == {"temperature": 33, "conditions": "Cloudy", "humidity": 82}

        # The server restarts: it no longer knows the worker's session (400 to every call).
        # A call that is not retry-safe is not sent again: the model is told; the next call
        # has a new session.
        server.kill()
        server = EverythingHttp(harness.tmp, port)
        second = harness.conv("everything-http-2")
        model = harness.script(
            calls(
                ("mcp__e__toggle-simulated-logging", {}),
                ("mcp__e__echo", {"message": "new session"}),
            )
        )
        assert (await harness.send(second, "go", model=model)).status == "completed"
        toggled, echoed = await results(harness, second)
        assert toggled.is_error
        assert str(toggled.output).startswith("McpServerUnavailable: MCP server 'e' refused")
        assert (echoed.output, echoed.is_error) == ("Echo: new session", False)

        # Again, and a retry-safe call comes first: it is sent once more on a new session.
        server.kill()
        server = EverythingHttp(harness.tmp, port)
        third = harness.conv("everything-http-3")
        model = harness.script(calls(("mcp__e__get-sum", {"a": 1, "b": 1})))
        assert (await harness.send(third, "go", model=model)).status == "completed"
        [total] = await results(harness, third)
        assert (total.output, total.is_error) == ("The sum of 1 and 1 is 2.", False)
    finally:
        server.kill()
