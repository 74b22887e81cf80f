"""The direct SDK calls of ``bench.pace``: one streamed model step in Anthropic's and in
OpenAI's (Responses) wire format, and the message that carries its tool results back.

The direct loops call them in-process; the pace floor's model activity (``bench.pace_floor``)
calls the Anthropic one. ``on_delta`` is called at every token delta (text or tool input) as
the SDK yields it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bench.pace_tools import weather

ANTHROPIC_MODEL, OPENAI_MODEL = "claude-sonnet-4-5", "gpt-5"
DESCRIPTION = "Current weather for a location"
SCHEMA = {
    "type": "object",
    "properties": {"location": {"type": "string"}},
    "required": ["location"],
}
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": DESCRIPTION, "input_schema": SCHEMA}]
OPENAI_TOOLS = [
    {"type": "function", "name": "get_weather", "description": DESCRIPTION, "parameters": SCHEMA}
]
OPENAI_DELTAS = ("response.output_text.delta", "response.function_call_arguments.delta")


async def anthropic_step(
    sdk: Any, messages: list[Any], on_delta: Callable[[], None]
) -> tuple[list[Any], list[dict[str, Any]]]:
    """One step: the assistant's content blocks (as dicts) and its tool calls (``id``,
    ``location``; none when it answered with text)."""
    async with sdk.messages.stream(
        model=ANTHROPIC_MODEL, max_tokens=256, messages=messages, tools=ANTHROPIC_TOOLS
    ) as stream:
        async for event in stream:
            if event.type == "content_block_delta":
                on_delta()
        reply = await stream.get_final_message()
    calls = [
        {"id": block.id, "location": str(block.input.get("location", ""))}
        for block in reply.content
        if block.type == "tool_use"
    ]
    return [block.model_dump(exclude_none=True) for block in reply.content], calls


def anthropic_results(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``get_weather`` for each call, as the user message's ``tool_result`` blocks."""
    return [
        {"type": "tool_result", "tool_use_id": c["id"], "content": weather(c["location"])}
        for c in calls
    ]


async def anthropic_loop(sdk: Any, on_delta: Callable[[], None], steps: int = 3) -> int:
    """The direct loop: up to ``steps`` steps, the tool called in-process; steps taken."""
    messages: list[Any] = [{"role": "user", "content": "weather?"}]
    for step in range(1, steps + 1):
        content, calls = await anthropic_step(sdk, messages, on_delta)
        if not calls:
            return step
        messages += [
            {"role": "assistant", "content": content},
            {"role": "user", "content": anthropic_results(calls)},
        ]
    return steps


async def openai_loop(sdk: Any, on_delta: Callable[[], None], steps: int = 3) -> int:
    """The same loop in OpenAI's Responses format (``responses.create(stream=True)``)."""
    items: list[Any] = [{"role": "user", "content": "weather?"}]
    for step in range(1, steps + 1):
        stream = await sdk.responses.create(
            model=OPENAI_MODEL, input=items, tools=OPENAI_TOOLS, stream=True
        )
        output: list[Any] = []
        async for event in stream:
            if event.type in OPENAI_DELTAS:
                on_delta()
            elif event.type == "response.completed":
                output = list(event.response.output)
        calls = [item for item in output if item.type == "function_call"]
        if not calls:
            return step
        items += [item.model_dump(exclude_none=True) for item in output]
        items += [
            {
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": weather(str(json.loads(call.arguments).get("location", ""))),
            }
            for call in calls
        ]
    return steps
