"""A local tool whose name an MCP server's tool takes (``mcp__t__echo``): the worker refuses."""

from durable_turns import tool


@tool(name="mcp__t__echo")
async def clash() -> str:
    """Named like an MCP tool."""
    return "local"
