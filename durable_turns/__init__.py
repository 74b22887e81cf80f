"""durable-turns: a chat-turn engine where every turn is a Temporal workflow."""

from durable_turns.tools import Tool, ToolContext, ToolRegistry, client_tool, tool

__all__ = ["Tool", "ToolContext", "ToolRegistry", "client_tool", "tool"]
