"""The pace bench's tool: ``get_weather(location)``, the shape of the recorded Anthropic
tool call (``testkit/fixtures/llm/anthropic/tool_use.sse``), offered to every model."""

from __future__ import annotations

from pydantic import BaseModel

from durable_turns.tools import ToolContext, tool


class Where(BaseModel):
    location: str


def weather(location: str) -> str:
    """The answer both sides of the bench compute: the same work in-process and as a tool."""
    return f"sunny, 20°C in {location}"


@tool()
async def get_weather(args: Where, ctx: ToolContext) -> str:
    """Current weather for a location (a bench stand-in)."""
    return weather(args.location)
