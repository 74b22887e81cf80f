"""MCP configuration, naming and the pooled session, without a Temporal server (the stdio
server is the SDK's, in tests/support/mcp_server.py)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from durable_turns.mcp import McpPool, McpServerConfig, parse_spec, servers_from, tool_name
from durable_turns.runtime import parser, settings_from_args
from durable_turns.tools import ToolContext, ToolRegistry, tool

SERVER = Path(__file__).parent / "support" / "mcp_server.py"


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
