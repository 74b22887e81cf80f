"""A worker's own ``get_weather`` (it replaces the demo one, which real models never see)."""

from __future__ import annotations

from pydantic import BaseModel

from durable_turns.tools import tool


class City(BaseModel):
    city: str


@tool(name="get_weather")
async def real_weather(args: City) -> str:
    """Current weather for a location (a test stand-in for a real weather service)."""
    return f"no live data for {args.city}"
