"""MCP configuration, naming and the pooled session, without a Temporal server (the stdio
server is the SDK's, in testkit/mcp_server.py)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp.types import ToolAnnotations

from durable_turns.mcp import (
    McpPool,
    McpServerConfig,
    ToolOverride,
    parse_spec,
    servers_from,
    tool_name,
    tool_policy,
)
from durable_turns.runtime import parser, settings_from_args
from durable_turns.tools import ToolContext, ToolRegistry, tool

SERVER = Path(__file__).parent.parent / "testkit" / "mcp_server.py"


def test_tool_names_fit_the_providers_and_are_deterministic() -> None:
    assert tool_name("files", "read_file") == "mcp__files__read_file"
    odd = tool_name("t", "weird.name/with spaces")
    assert odd == tool_name("t", "weird.name/with spaces")
    assert odd.startswith("mcp__t__weird_name_with_spaces_") and len(odd) == 39
    assert tool_name("t", "a.b") != tool_name("t", "a_b")
    long = tool_name("server", "x" * 100)
    assert len(long) == 64 and long != tool_name("server", "x" * 101)


def test_specs_from_the_command_line_and_the_environment() -> None:
    stdio = parse_spec("files=npx -y '@scope/server files' /tmp")
    assert (stdio.command, stdio.args) == ("npx", ("-y", "@scope/server files", "/tmp"))
    http = parse_spec("remote=https://example.com/mcp")
    assert http.url == "https://example.com/mcp" and http.transport == "http"
    for bad in ("nameonly", "=cmd", "a__b=cmd", "a.b=cmd"):
        with pytest.raises(ValueError):
            servers_from([bad], None)
    with pytest.raises(ValueError, match="two MCP servers"):
        servers_from(["a=cmd", "a=other"], None)


def test_turns_mcp_and_flags_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNS_MCP", "a=cmd one; b=https://h/mcp")
    monkeypatch.setenv("TURNS_MCP_CONFIG", "servers.json")
    args = parser().parse_args(["--mcp", "c=cmd two", "--mcp-config", "other.json"])
    settings = settings_from_args(args)
    assert settings.mcp == ["a=cmd one", "b=https://h/mcp", "c=cmd two"]
    assert settings.mcp_config == "other.json"


def test_config_file_substitutes_the_environment_and_never_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "api": {
                        "url": "https://api.example.com/mcp",
                        "headers": {"Authorization": "Bearer ${API_TOKEN}"},
                    },
                    "local": {"command": "srv", "args": ["--key", "${API_TOKEN}"], "cwd": "/srv"},
                }
            }
        )
    )
    with pytest.raises(ValueError, match="API_TOKEN is not set"):
        servers_from([], str(path))
    monkeypatch.setenv("API_TOKEN", "tok-123")
    api, local = servers_from([], str(path))
    resolved, secrets = api.resolved()
    assert resolved.headers == {"Authorization": "Bearer tok-123"} and secrets == ["tok-123"]
    assert "tok-123" not in api.describe() + local.describe() + repr(api)
    assert local.describe() == "stdio: srv --key '${API_TOKEN}'"
    path.write_text(json.dumps({"mcpServers": {"x": {"command": "a", "bogus": 1}}}))
    with pytest.raises(ValueError, match="unknown keys"):
        servers_from([], str(path))


def test_a_group_never_takes_a_local_name_and_keeps_its_order() -> None:
    @tool(name="mcp__t__echo")
    async def local() -> str:
        return ""

    @tool(name="zeta")
    async def zeta() -> str:
        return ""

    registry = ToolRegistry([zeta, local])
    with pytest.raises(ValueError, match="own tools"):
        registry.set_group("t", [local])
    registry = ToolRegistry([zeta])
    registry.set_group("t", [local])
    registry.set_group(
        "a", [zeta.__class__(name="mcp__a__x", description="", input_model=zeta.input_model)]
    )
    assert registry.names() == ["zeta", "mcp__a__x", "mcp__t__echo"]
    with pytest.raises(ValueError):
        registry.add(local)


async def test_pool_lists_once_refreshes_on_list_changed_and_restarts() -> None:
    registry = ToolRegistry()
    config = McpServerConfig(name="t", command=sys.executable, args=(str(SERVER),))
    pool = McpPool([config], registry)
    await pool.start()
    try:
        before = registry.names()
        assert "mcp__t__echo" in before and "mcp__t__extra" not in before
        ctx = ToolContext("call-1", "mcp__t__grow", "c", 1, "r", 0)
        grow = registry.get("mcp__t__grow")
        assert grow is not None
        await grow.run(grow.input_model.model_validate({}), ctx)
        for _ in range(50):
            if "mcp__t__extra" in registry.names():
                break
            await asyncio.sleep(0.1)
        assert registry.names() == sorted([*before, "mcp__t__extra"])
        [conn] = pool.connections
        conn.dead()  # as after a crash: the next call starts a new session
        echo = registry.get("mcp__t__echo")
        assert echo is not None
        out = await echo.run(echo.input_model.model_validate({"text": "x"}), ctx)
        assert out == "echo: x" and conn.alive
    finally:
        await pool.aclose()


async def test_a_server_that_cannot_start_does_not_stop_the_worker() -> None:
    registry = ToolRegistry()
    config = McpServerConfig(name="gone", command="/nonexistent/mcp-server", connect_timeout_s=2)
    pool = McpPool([config], registry)
    await pool.start()
    try:
        assert registry.names() == []
        assert "down" in pool.describe()[0]
    finally:
        await pool.aclose()


def test_approval_and_retry_safety_from_the_annotations_and_the_config() -> None:
    def hints(**kw: bool) -> ToolAnnotations:
        return ToolAnnotations(**kw)

    def policy(approval: str = "destructive", **kw: Any) -> Callable[[Any], tuple[bool, bool]]:
        config = McpServerConfig(name="s", command="srv", approval=approval, **kw)  # type: ignore[arg-type]
        return lambda h: tool_policy(config, "t", h)

    spec = policy()  # the MCP spec's defaults: destructive unless it says otherwise
    assert spec(None) == (False, True), "unannotated: not retry-safe, asks"
    assert spec(hints(read_only_hint=True)) == (True, False)
    assert spec(hints(destructive_hint=False)) == (False, False)
    assert spec(hints(idempotent_hint=True)) == (True, True), "idempotent is not harmless"
    assert spec(hints(idempotent_hint=True, destructive_hint=False)) == (True, False)
    assert spec(hints(read_only_hint=True, destructive_hint=True)) == (True, False)
    explicit = policy("explicit")  # only a tool that says destructiveHint: true asks
    assert explicit(None) == (False, False)
    assert explicit(hints(destructive_hint=True)) == (False, True)
    assert policy("always")(hints(read_only_hint=True)) == (True, True)
    assert policy("never")(hints(destructive_hint=True)) == (False, False)
    assert policy(retry_safe=True)(None) == (True, True)
    override = policy(tools={"t": ToolOverride(approval=False, retry_safe=True)})
    assert override(None) == (True, False)
    assert policy("never", tools={"t": ToolOverride(approval=True)})(None) == (False, True)
    with pytest.raises(ValueError, match="approval is one of"):
        McpServerConfig(name="s", command="srv", approval="sometimes")  # type: ignore[arg-type]


def test_config_file_takes_per_tool_overrides(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    entry = {"command": "srv", "approval": "explicit", "tools": {"rm": {"approval": True}}}
    path.write_text(json.dumps({"mcpServers": {"s": entry}}))
    [server] = servers_from([], str(path))
    assert server.approval == "explicit"
    assert server.tools == {"rm": ToolOverride(approval=True)}
    for bad, why in (
        ({"rm": {"approve": True}}, "unknown keys"),
        ({"rm": {"approval": "yes"}}, "true or false"),
        (["rm"], "tools is an object"),
    ):
        path.write_text(json.dumps({"mcpServers": {"s": {"command": "srv", "tools": bad}}}))
        with pytest.raises(ValueError, match=why):
            servers_from([], str(path))


async def test_the_test_servers_tools_get_the_policy_of_their_annotations() -> None:
    registry = ToolRegistry()
    config = McpServerConfig(
        name="t",
        command=sys.executable,
        args=(str(SERVER),),
        tools={"slow": ToolOverride(retry_safe=True)},
    )
    pool = McpPool([config], registry)
    await pool.start()
    try:

        def of(name: str) -> tuple[bool, bool]:
            t = registry.get(f"mcp__t__{name}")
            assert t is not None
            return t.retry_safe, t.needs_approval

        assert of("touch") == (False, True), "unannotated: the spec's destructive default"
        assert of("delete_file") == (False, True)
        assert of("echo") == (True, False)
        assert of("add") == (True, False)
        assert of("crash") == (False, False)
        assert of("slow") == (True, False), "the per-tool override"
    finally:
        await pool.aclose()


async def test_two_sessions_render_the_same_tool_list() -> None:
    """What the prompt cache needs: a new session (another worker, a restart) offers the
    model the same tools, in the same order, with the same schema text."""
    rendered = []
    for _ in range(2):
        registry = ToolRegistry()
        config = McpServerConfig(name="t", command=sys.executable, args=(str(SERVER),))
        pool = McpPool([config], registry)
        await pool.start()
        try:
            specs = [registry.get(n).spec for n in registry.names()]  # type: ignore[union-attr]
            rendered.append(json.dumps([s.model_dump(mode="json") for s in specs]))
        finally:
            await pool.aclose()
    assert rendered[0] == rendered[1]
    add = json.loads(rendered[0])[0]
    assert add["name"] == "mcp__t__add" and list(add["input_schema"]) == sorted(add["input_schema"])


async def test_an_answer_again_is_no_fault_an_answer_to_nothing_is() -> None:
    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCRequest, JSONRPCResponse

    from durable_turns.mcp import McpConnection, _Live, _outbound

    conn = McpConnection(McpServerConfig(name="t", command="srv"), lambda c: None)
    live = _Live()
    live.calls = 1  # a call is running
    _outbound(live, SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=7, method="tools/call")))

    def answer(id: int) -> SessionMessage:
        return SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=id, result={}))

    conn._inbound(live, answer(7))
    conn._inbound(live, answer(7))  # the same answer again (a replayed SSE stream)
    assert not live.fault.is_set()
    conn._inbound(live, answer(8))
    assert live.fault.is_set() and "never sent (id 8)" in live.fault_text
