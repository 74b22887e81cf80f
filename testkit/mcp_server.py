"""A small MCP server written with the official ``mcp`` SDK, for the MCP tests.

    python testkit/mcp_server.py               stdio
    python testkit/mcp_server.py --http PORT   streamable HTTP on 127.0.0.1:PORT/mcp

Every call is appended to ``$MCP_TEST_LOG`` (JSON lines: tool, pid, the request's id and
``_meta``), so a test sees which process ran a call and the idempotency key it was given; so
is every ``notifications/cancelled`` the server receives, and a slow call that ended or was
cancelled. The ``bad_*`` tools break the protocol on stdout (stdio only) and then hang.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CancelledNotificationParams, ImageContent, TextContent, ToolAnnotations


def _log(tool: str, ctx: Context | None = None, **extra: Any) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if not path:
        return
    meta = dict(ctx.request_context.meta or {}) if ctx is not None else {}
    request = ctx.request_id if ctx is not None else None
    line = {"tool": tool, "pid": os.getpid(), "request": request, "meta": meta, **extra}
    with open(path, "a") as f:
        f.write(json.dumps(line, default=str) + "\n")


async def _cancels_logged(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """Middleware: a client's ``notifications/cancelled`` is logged, then handled as usual."""
    if ctx.method == "notifications/cancelled" and ctx.request_id is None:
        params = CancelledNotificationParams.model_validate(ctx.params or {})
        _log("notifications/cancelled", request=str(params.request_id), reason=params.reason)
    return await call_next(ctx)


server = MCPServer("durable-turns-test", middleware=[_cancels_logged])


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def echo(text: str, ctx: Context) -> str:
    """Echo the text back."""
    _log("echo", ctx, text=text)
    return f"echo: {text}"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
async def add(a: int, b: int, ctx: Context) -> dict[str, int]:
    """Add two numbers (structured output)."""
    _log("add", ctx)
    return {"sum": a + b}


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
async def delete_file(path: str, ctx: Context) -> str:
    """Delete a file (pretend)."""
    _log("delete_file", ctx, path=path)
    return f"deleted {path}"


async def _sleep(tool: str, seconds: float, ctx: Context) -> str:
    _log(tool, ctx, seconds=seconds)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        _log(f"{tool} cancelled", ctx)
        raise
    _log(f"{tool} ended", ctx)
    return "woke up"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
async def slow(seconds: float, ctx: Context) -> str:
    """Sleep, then answer (a server that hangs; not retry-safe)."""
    return await _sleep("slow", seconds, ctx)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow_read(seconds: float, ctx: Context) -> str:
    """Sleep, then answer (read-only: retry-safe)."""
    return await _sleep("slow_read", seconds, ctx)


@server.tool()
async def touch(path: str, ctx: Context) -> str:
    """No annotations: the MCP spec's defaults make it destructive."""
    _log("touch", ctx, path=path)
    return f"touched {path}"


_WIRE = os.dup(1)
"""The JSON-RPC stream itself: the SDK's stdio server moves it off fd 1 (where a stray
``print`` then lands on stderr), so a server that breaks the protocol writes here."""


def _stdout(line: str) -> None:
    """A line on the JSON-RPC stream, past the SDK (a server that breaks the protocol)."""
    os.write(_WIRE, line.encode() + b"\n")


async def _hang() -> str:
    await asyncio.sleep(3600)
    return "never"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def bad_garbage(ctx: Context) -> str:
    """Writes a line that is not JSON instead of an answer."""
    _log("bad_garbage", ctx)
    _stdout("this is not json")
    return await _hang()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def bad_json(ctx: Context) -> str:
    """Writes the start of an answer, cut off."""
    _log("bad_json", ctx)
    _stdout('{"jsonrpc": "2.0", "id": ' + ctx.request_id + ', "result": {"content": [')
    return await _hang()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def bad_id(ctx: Context) -> str:
    """Answers a request that was never sent."""
    _log("bad_id", ctx)
    _stdout(json.dumps({"jsonrpc": "2.0", "id": 987654, "result": {"content": []}}))
    return await _hang()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def bad_result(ctx: Context) -> str:
    """Answers with a result that is not a tool result (``content`` is no list)."""
    _log("bad_result", ctx)
    answer = {"jsonrpc": "2.0", "id": int(ctx.request_id), "result": {"content": "nope"}}
    _stdout(json.dumps(answer))
    return await _hang()


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
async def crash(ctx: Context) -> str:
    """The server process dies mid-call."""
    _log("crash", ctx)
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def big(megabytes: int, ctx: Context) -> str:
    """A result of that many megabytes."""
    _log("big", ctx)
    return "x" * (megabytes * 1024 * 1024)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def fail(ctx: Context) -> str:
    """Always fails (an isError result)."""
    _log("fail", ctx)
    raise ValueError("the server says no")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def picture(ctx: Context) -> list[TextContent | ImageContent]:
    """A caption and a tiny image."""
    _log("picture", ctx)
    data = base64.b64encode(b"\x89PNG fake image bytes").decode()
    return [
        TextContent(type="text", text="a red dot"),
        ImageContent(type="image", data=data, mime_type="image/png"),
    ]


@server.tool(name="weird.name/with spaces", annotations=ToolAnnotations(read_only_hint=True))
async def weird(ctx: Context) -> str:
    """A tool whose name fits no provider's rules."""
    _log("weird", ctx)
    return "weird ok"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
async def grow(ctx: Context) -> str:
    """Adds the tool ``extra`` and tells the client its tool list changed."""
    _log("grow", ctx)

    async def extra() -> str:
        """Added at run time."""
        return "extra ok"

    server.add_tool(extra, name="extra")
    await ctx.session.send_tool_list_changed()
    return "grown"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve streamable HTTP on this port")
    args = parser.parse_args()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
