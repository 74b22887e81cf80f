"""The tools the demo scripts call. Deterministic, offline, and honest about it.

They are offered to ``demo:`` models only: a real model is never handed a tool that
invents forecasts.
"""

from __future__ import annotations

import zlib

from pydantic import BaseModel, Field

from durable_turns.tools import ToolContext, tool

_SKIES = ["sunny", "cloudy", "light rain", "windy", "clear", "foggy"]


class WeatherArgs(BaseModel):
    city: str = Field(description="City name, e.g. Paris")


@tool(models=("demo",))
async def get_weather(args: WeatherArgs, ctx: ToolContext) -> str:
    """Current weather for a city (a deterministic demo, not a real forecast)."""
    seed = zlib.crc32(args.city.lower().encode())
    return f"{_SKIES[seed % len(_SKIES)]}, {8 + seed % 20}°C in {args.city}"
