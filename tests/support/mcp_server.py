"""A small MCP server written with the official ``mcp`` SDK, for the MCP tests.

    python tests/support/mcp_server.py               stdio
    python tests/support/mcp_server.py --http PORT   streamable HTTP on 127.0.0.1:PORT/mcp

Every call is appended to ``$MCP_TEST_LOG`` (JSON lines: tool, pid, the request's ``_meta``),
so a test sees which process ran a call and the idempotency key it was given.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent, TextContent, ToolAnnotations

server = MCPServer("durable-turns-test")


def _log(tool: str, ctx: Context | None = None, **extra: Any) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if not path:
        return
    meta = dict(ctx.request_context.meta or {}) if ctx is not None else {}
    line = {"tool": tool, "pid": os.getpid(), "meta": meta, **extra}
    with open(path, "a") as f:
        f.write(json.dumps(line, default=str) + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def echo(text: str, ctx: Context) -> str:
    """Echo the text back."""
    _log("echo", ctx, text=text)
    return f"echo: {text}"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True))
async def add(a: int, b: int, ctx: Context) -> dict[str, int]:
    """Add two numbers (structured output)."""
    _log("add", ctx)
    return {"sum": a + b}


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
async def delete_file(path: str, ctx: Context) -> str:
    """Delete a file (pretend)."""
    _log("delete_file", ctx, path=path)
    return f"deleted {path}"


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Sleep, then answer (a server that hangs)."""
    _log("slow", ctx, seconds=seconds)
    await asyncio.sleep(seconds)
    return "woke up"


@server.tool()
async def crash(ctx: Context) -> str:
    """The server process dies mid-call."""
    _log("crash", ctx)
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def big(megabytes: int, ctx: Context) -> str:
    """A result of that many megabytes."""
    _log("big", ctx)
    return "x" * (megabytes * 1024 * 1024)


@server.tool()
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


@server.tool(name="weird.name/with spaces")
async def weird(ctx: Context) -> str:
    """A tool whose name fits no provider's rules."""
    _log("weird", ctx)
    return "weird ok"


@server.tool()
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
