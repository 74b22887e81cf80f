"""Tools named like the ones in the recorded provider streams, so a real worker can run the
calls those recordings make (``TURNS_TOOLS=...,tests.support.provider_tools``).

* ``get_capital`` (``openai/responses_reasoning_text_function_call.sse``: PotatoLand),
* ``calculator`` (``openai/responses_calculator.*.sse``: 12 + 7, × 3, × 10),
* ``get_weather`` (``anthropic/tool_use.sse``: ``{"location": "Paris"}``;
  ``openai/chat_tool_call.sse``: ``{"city": "New York City"}``); it replaces the worker's
  built-in demo tool of that name, which real models are not offered.

Each run is logged like the other test tools (``TEST_TOOL_LOG``), with its input.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from durable_turns.tools import ToolContext, tool
from tests.support.tools import _log


class CapitalArgs(BaseModel):
    country: str


@tool
async def get_capital(args: CapitalArgs, ctx: ToolContext) -> str:
    """The capital of a country."""
    _log(ctx, input=args.model_dump())
    return "Potato City" if args.country == "PotatoLand" else "unknown"


class CalculatorArgs(BaseModel):
    a: float
    b: float
    op: Literal["add", "subtract", "multiply", "divide"] = "add"


@tool
async def calculator(args: CalculatorArgs, ctx: ToolContext) -> str:
    """A minimal calculator for basic arithmetic. Call it once per step."""
    _log(ctx, input=args.model_dump())
    value = {
        "add": args.a + args.b,
        "subtract": args.a - args.b,
        "multiply": args.a * args.b,
        "divide": args.a / args.b if args.b else float("nan"),
    }[args.op]
    return f"{value:g}"


class WeatherArgs(BaseModel):
    location: str | None = None
    city: str | None = None


@tool(name="get_weather")
async def recorded_weather(args: WeatherArgs, ctx: ToolContext) -> str:
    """Weather for a city (a test stand-in)."""
    _log(ctx, input=args.model_dump())
    return f"sunny, 21°C in {args.location or args.city}"
