"""Tools from MCP servers, through real worker processes and a real MCP server (the SDK's):
stdio and streamable HTTP, a server killed mid-call, one that hangs, a 10 MB result."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from durable_turns.messages import TextPart, ToolCallPart, ToolResultPart
from tests.support.harness import ROOT, Harness
from tests.support.probes import free_port, pending_calls, turns_done, wait_until

SERVER = ROOT / "testkit" / "mcp_server.py"
STDIO = f"t={shlex.quote(sys.executable)} {shlex.quote(str(SERVER))}"


def calls(*tools: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A script: one step per tool call, then a step that says every result."""
    steps: list[dict[str, Any]] = [
        {"tool_calls": [{"name": name, "input": args}]} for name, args in tools
    ]
    return [*steps, {"text": "done"}]


def mcp_log(harness: Harness) -> list[dict[str, Any]]:
    path = harness.tmp / "mcp.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def log_pids(harness: Harness) -> set[int]:
    return {int(r["pid"]) for r in mcp_log(harness)}


def _reap(pids: set[int]) -> None:
    """Stop the test's MCP server processes that outlived a killed worker (a stdio server
    runs in a session of its own: it ends when it reads the end of its stdin)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):  # a child of ours: reap it first
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    return True


def start(harness: Harness, **env: str) -> None:
    harness.start_worker(MCP_TEST_LOG=str(harness.tmp / "mcp.jsonl"), **env)


def stdio_config(harness: Harness, **options: Any) -> str:
    """A config file for the stdio server; the server sees only the environment it is given
    (here ``MCP_TEST_LOG``, through ``${…}``), not the worker's."""
    entry = {
        "command": sys.executable,
        "args": [str(SERVER)],
        "env": {"MCP_TEST_LOG": "${MCP_TEST_LOG}"},
        **options,
    }
    path = harness.tmp / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"t": entry}}))
    return str(path)


async def results(harness: Harness, conversation: str) -> list[ToolResultPart]:
    messages = await (await harness.store()).messages(conversation)
    return [p for m in messages for p in m.parts if isinstance(p, ToolResultPart)]


async def test_stdio_tools_run_as_tool_calls_with_the_call_id(harness: Harness) -> None:
    start(harness, TURNS_MCP_CONFIG=stdio_config(harness))
    conversation = harness.conv("mcp-stdio")
    model = harness.script(
        [
            {
                "text": "{request.tools}",
                "tool_calls": [{"name": "mcp__t__add", "input": {"a": 2, "b": 3}}],
            },
            {"tool_calls": [{"name": "mcp__t__echo", "input": {"text": "hi"}}]},
            {"tool_calls": [{"name": "mcp__t__fail", "input": {}}]},
            {"tool_calls": [{"name": "mcp__t__picture", "input": {}}]},
            {"text": "done"},
        ]
    )
    result = await harness.send(conversation, "go", model=model)
    assert result.status == "completed"
    outputs = await results(harness, conversation)
    assert [(r.output, r.is_error) for r in outputs] == [
        ({"sum": 5}, False),
        ("echo: hi", False),
        ("Error executing tool fail", True),
        (
            [
                {"type": "text", "text": "a red dot"},
                {"type": "image", "mime_type": "image/png", "bytes": 21},
            ],
            False,
        ),
    ]
    messages = await (await harness.store()).messages(conversation)
    call_ids = [p.tool_call_id for m in messages for p in m.parts if isinstance(p, ToolCallPart)]
    runs = mcp_log(harness)
    assert [r["tool"] for r in runs] == ["add", "echo", "fail", "picture"]
    assert [r["meta"]["durable-turns/tool-call-id"] for r in runs] == call_ids
    assert len({r["pid"] for r in runs}) == 1, "one pooled session"
    # the model is offered every MCP tool, after the worker's own, in name order
    texts = [p.text for m in messages[1:] for p in m.parts if isinstance(p, TextPart) and p.text]
    offered = json.loads(texts[0])
    names = [n for n in offered if n.startswith("mcp__")]
    assert names == sorted(names) and offered[-len(names) :] == names and len(names) == 16
    assert "mcp__t__weird_name_with_spaces_3f99da9c" in names


async def test_server_killed_mid_call_is_an_error_then_restarted(harness: Harness) -> None:
    start(harness, TURNS_MCP_CONFIG=stdio_config(harness))
    conversation = harness.conv("mcp-crash")
    model = harness.script(calls(("mcp__t__crash", {}), ("mcp__t__echo", {"text": "after"})))
    assert (await harness.send(conversation, "go", model=model)).status == "completed"
    crashed, echoed = await results(harness, conversation)
    assert crashed.is_error and str(crashed.output).startswith("McpServerUnavailable: ")
    assert "(it is started again on the next call)" in str(crashed.output)
    assert (echoed.output, echoed.is_error) == ("echo: after", False)
    first, second = mcp_log(harness)
    assert first["pid"] != second["pid"], "a new server process"


async def test_a_hanging_server_is_bounded_by_the_tool_timeout(harness: Harness) -> None:
    start(harness, TURNS_MCP_CONFIG=stdio_config(harness, timeout_s=2))
    conversation = harness.conv("mcp-hang")
    model = harness.script(
        calls(("mcp__t__slow", {"seconds": 60}), ("mcp__t__echo", {"text": "still here"}))
    )
    started = time.monotonic()
    assert (await harness.send(conversation, "go", model=model)).status == "completed"
    assert time.monotonic() - started < 30
    hung, echoed = await results(harness, conversation)
    assert hung.is_error
    assert hung.output == 'ToolTimeout: tool "mcp__t__slow" did not finish within 2s.'
    assert echoed.output == "echo: still here"
    [call] = [r for r in mcp_log(harness) if r["tool"] == "slow"]
    told = [r for r in mcp_log(harness) if r["tool"] == "notifications/cancelled"]
    assert [r["request"] for r in told] == [call["request"]], "the server was told to stop"
    assert "slow ended" not in [r["tool"] for r in mcp_log(harness)]


async def test_a_10_mb_result_is_tool_output_too_large(harness: Harness) -> None:
    start(harness, TURNS_MCP=STDIO)
    conversation = harness.conv("mcp-big")
    model = harness.script(
        calls(("mcp__t__big", {"megabytes": 10}), ("mcp__t__echo", {"text": "ok"}))
    )
    assert (await harness.send(conversation, "go", model=model)).status == "completed"
    big, echoed = await results(harness, conversation)
    assert big.is_error and str(big.output).startswith("ToolOutputTooLarge: ")
    assert echoed.output == "echo: ok"


async def test_a_destructive_tool_needs_approval(harness: Harness) -> None:
    start(harness, TURNS_MCP_CONFIG=stdio_config(harness))
    conversation = harness.conv("mcp-approve")
    model = harness.script(
        [
            {"tool_calls": [{"name": "mcp__t__delete_file", "input": {"path": "/tmp/x"}}]},
            {"text": "Result: {tool_result}"},
        ]
    )
    await harness.turns.submit(conversation, "delete it", model=model)
    [call] = await pending_calls(harness, conversation)
    assert call["waiting_for"] == "approval"
    assert mcp_log(harness) == [], "nothing runs before the approval"
    await harness.turns.approve(conversation, call["tool_call_id"])
    await wait_until(lambda: turns_done(harness, conversation, 2))
    state = await harness.turns.state(conversation)
    assert state.last_result is not None and state.last_result.text == "Result: deleted /tmp/x"


async def test_a_name_clash_with_a_local_tool_stops_the_worker(harness: Harness) -> None:
    with pytest.raises(RuntimeError) as info:
        start(harness, TURNS_MCP=STDIO, TURNS_TOOLS="tests.support.mcp_clash_tools")
    assert "mcp__t__echo" in str(info.value)


class HttpServer:
    def __init__(self, tmp: Path, port: int) -> None:
        self.port = port
        self.log = open(tmp / f"mcp-http-{time.monotonic_ns()}.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--http", str(port)],
            stdout=self.log,
            stderr=self.log,
            env={"MCP_TEST_LOG": str(tmp / "mcp.jsonl"), "PATH": "/usr/bin:/bin"},
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("the MCP HTTP server did not start")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


async def test_streamable_http_reconnects_after_the_server_restarts(harness: Harness) -> None:
    port = free_port()
    server = HttpServer(harness.tmp, port)
    config = harness.tmp / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "h": {
                        "url": f"http://127.0.0.1:{port}/mcp",
                        "headers": {"Authorization": "Bearer ${MCP_TEST_SECRET}"},
                        "connect_timeout_s": 5,
                    }
                }
            }
        )
    )
    try:
        start(harness, TURNS_MCP_CONFIG=str(config), MCP_TEST_SECRET="s3cret-value")
        first = harness.conv("mcp-http-1")
        model = harness.script(calls(("mcp__h__echo", {"text": "one"})))
        assert (await harness.send(first, "go", model=model)).status == "completed"
        [one] = await results(harness, first)
        assert one.output == "echo: one"

        server.kill()
        down = harness.conv("mcp-http-2")
        model = harness.script(calls(("mcp__h__echo", {"text": "two"})))
        assert (await harness.send(down, "go", model=model)).status == "completed"
        [two] = await results(harness, down)
        assert two.is_error and str(two.output).startswith("McpServerUnavailable: ")

        server = HttpServer(harness.tmp, port)
        back = harness.conv("mcp-http-3")
        model = harness.script(calls(("mcp__h__echo", {"text": "three"})))
        assert (await harness.send(back, "go", model=model)).status == "completed"
        [three] = await results(harness, back)
        assert (three.output, three.is_error) == ("echo: three", False)
    finally:
        server.kill()
    for worker in harness.workers:
        assert "s3cret-value" not in worker.log_tail(1_000_000)


async def test_an_http_server_that_drops_mid_call_is_reconnected_not_started(
    harness: Harness,
) -> None:
    """Old code: an HTTP server that dropped was said "started again", as a stdio one is."""
    port = free_port()
    server = HttpServer(harness.tmp, port)
    config = harness.tmp / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"h": {"url": f"http://127.0.0.1:{port}/mcp"}}}))
    try:
        start(harness, TURNS_MCP_CONFIG=str(config))
        conversation = harness.conv("mcp-http-drop")
        model = harness.script(calls(("mcp__h__crash", {})))
        assert (await harness.send(conversation, "go", model=model)).status == "completed"
        [dropped] = await results(harness, conversation)
        assert dropped.is_error and str(dropped.output).startswith("McpServerUnavailable: ")
        assert str(dropped.output).endswith("(it is reconnected on the next call)"), dropped.output
    finally:
        server.kill()


@pytest.mark.timeout(90)
async def test_malformed_json_rpc_fails_the_call_and_the_session_starts_anew(
    harness: Harness,
) -> None:
    start(harness, TURNS_MCP_CONFIG=stdio_config(harness))
    conversation = harness.conv("mcp-malformed")
    model = harness.script(
        calls(
            ("mcp__t__bad_garbage", {}),
            ("mcp__t__echo", {"text": "after garbage"}),
            ("mcp__t__bad_json", {}),
            ("mcp__t__echo", {"text": "after cut-off json"}),
            ("mcp__t__bad_id", {}),
            ("mcp__t__echo", {"text": "after a wrong id"}),
            ("mcp__t__bad_result", {}),
            ("mcp__t__echo", {"text": "after a bad result"}),
        )
    )
    started = time.monotonic()
    assert (await harness.send(conversation, "go", model=model)).status == "completed"
    assert time.monotonic() - started < 60, "no call waited out its 300 s timeout"
    garbage, one, cut, two, wrong, three, bad, four = await results(harness, conversation)
    prefix = "McpProtocolError: MCP server 't' "
    for broken in (garbage, cut, wrong, bad):
        assert broken.is_error and str(broken.output).startswith(prefix), broken.output
    assert "not a JSON-RPC message" in str(garbage.output) and "this is not json" in str(
        garbage.output
    )
    assert "not a JSON-RPC message" in str(cut.output)
    assert "answered a request that was never sent (id 987654)" in str(wrong.output)
    assert "not a tool result" in str(bad.output)
    assert [(r.output, r.is_error) for r in (one, two, three, four)] == [
        ("echo: after garbage", False),
        ("echo: after cut-off json", False),
        ("echo: after a wrong id", False),
        ("echo: after a bad result", False),
    ]
    pids = {r["tool"]: r["pid"] for r in mcp_log(harness) if r["tool"].startswith("bad_")}
    assert len({pids["bad_garbage"], pids["bad_json"], pids["bad_id"]}) == 3, (
        "a session whose stream broke is started anew"
    )
    after_bad_result = [r for r in mcp_log(harness) if r["tool"] == "echo"][-1]
    assert after_bad_result["pid"] == pids["bad_result"], "a bad result keeps the session"
    [worker] = harness.workers
    assert worker.proc.poll() is None, "the worker survives"


@pytest.mark.timeout(90)
async def test_cancelling_a_turn_mid_call_tells_the_server(harness: Harness) -> None:
    start(harness, TURNS_MCP_CONFIG=stdio_config(harness))
    conversation = harness.conv("mcp-cancel")
    model = harness.script(calls(("mcp__t__slow", {"seconds": 60})))
    request = await harness.turns.submit(conversation, "go", model=model)
    await wait_until(lambda: any(r["tool"] == "slow" for r in mcp_log(harness)))
    await harness.turns.cancel(conversation)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "aborted"
    await wait_until(lambda: any(r["tool"] == "slow cancelled" for r in mcp_log(harness)))
    [call] = [r for r in mcp_log(harness) if r["tool"] == "slow"]
    [notice] = [r for r in mcp_log(harness) if r["tool"] == "notifications/cancelled"]
    assert notice["request"] == call["request"], "the server was told which request to stop"
    assert notice["pid"] == call["pid"], "the same session: nothing was restarted"
    # the session goes on: the next turn's call runs in the same server process
    after = harness.conv("mcp-cancel-after")
    model = harness.script(calls(("mcp__t__echo", {"text": "still here"})))
    assert (await harness.send(after, "go", model=model)).status == "completed"
    [echoed] = await results(harness, after)
    assert echoed.output == "echo: still here"
    assert mcp_log(harness)[-1]["pid"] == call["pid"]


@pytest.mark.timeout(90)
async def test_worker_killed_mid_call_reruns_only_retry_safe_tools(harness: Harness) -> None:
    first = harness.start_worker(
        MCP_TEST_LOG=str(harness.tmp / "mcp.jsonl"), TURNS_MCP_CONFIG=stdio_config(harness)
    )
    conversation = harness.conv("mcp-worker-crash")
    model = harness.script(
        [
            {
                "tool_calls": [
                    {"name": "mcp__t__slow_read", "input": {"seconds": 3}},
                    {"name": "mcp__t__slow", "input": {"seconds": 3}},
                ]
            },
            {"text": "results: {tool_results}"},
        ]
    )
    request = await harness.turns.submit(conversation, "go", model=model)
    await wait_until(lambda: {"slow", "slow_read"} <= {r["tool"] for r in mcp_log(harness)})
    first.kill()
    second = harness.start_worker(
        MCP_TEST_LOG=str(harness.tmp / "mcp.jsonl"), TURNS_MCP_CONFIG=stdio_config(harness)
    )
    try:
        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 90)
        assert result.status == "completed"
        read, unsafe = await results(harness, conversation)
        assert (read.output, read.is_error) == ("woke up", False)
        assert unsafe.is_error and "interrupted before a result was recorded" in str(unsafe.output)
        log = mcp_log(harness)
        reads = [r for r in log if r["tool"] == "slow_read"]
        assert len(reads) == 2, "the read-only tool ran again on the second worker"
        assert reads[0]["meta"]["durable-turns/tool-call-id"] == read.tool_call_id
        assert reads[1]["meta"]["durable-turns/tool-call-id"] == read.tool_call_id
        assert [r["meta"]["durable-turns/attempt"] for r in reads] == [1, 2]
        assert reads[0]["pid"] != reads[1]["pid"], "in the second worker's server"
        assert [r["tool"] for r in log].count("slow") == 1, "the unsafe tool did not run again"
        assert second.proc.poll() is None
        # the dead worker's server read the end of its stdin and went too
        orphan = reads[0]["pid"]
        await wait_until(lambda: not _alive(orphan), within=20)
    finally:
        _reap(log_pids(harness))
