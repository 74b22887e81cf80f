"""Peer: the OpenAI Agents SDK's Temporal integration (``temporalio.openai_agents``).

Runs only in the peers' virtual environment (see ``bench/peers.py``). The model is a custom
``Model`` behind a ``ModelProvider`` that plays the same script as the engine's demo model:
``steps=N`` in the prompt means N - 1 calls of ``get_weather`` (an activity, through
``activity_as_tool``), then a text answer. A turn is one workflow run of ``Runner.run`` with
the prior conversation as input items.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no trace export (no network)

from agents import Agent, Model, ModelProvider, ModelResponse, Runner, set_tracing_disabled
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.openai_agents.testing import ResponseBuilders
from temporalio.openai_agents.workflow import activity_as_tool
from temporalio.worker import Worker

set_tracing_disabled(True)

NAME = "openai-agents"
PACKAGES = ["openai-agents", "temporalio-openai-agents"]
TIMEOUT = timedelta(seconds=60)


def is_model_activity(name: str) -> bool:
    return name == "invoke_model_activity"


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


class ScriptedModel(Model):
    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        start = max(i for i, it in enumerate(items) if _get(it, "role") == "user")
        steps = int(re.search(r"steps=(\d+)", str(_get(items[start], "content"))).group(1))  # type: ignore[union-attr]
        taken = sum(_get(it, "type") == "function_call" for it in items[start:])
        if taken < steps - 1:
            return ResponseBuilders.tool_call(
                '{"city": "Oslo"}', "get_weather", call_id=f"call_{taken}", item_id=f"fc_{taken}"
            )
        return ResponseBuilders.output_message("Here you are.")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class ScriptedProvider(ModelProvider):
    def get_model(self, model_name: str | None) -> Model:
        return ScriptedModel()


@activity.defn
async def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny, 20°C in {city}"


@workflow.defn(name="OpenAIAgentsTurn")
class OpenAIAgentsTurn:
    @workflow.run
    async def run(self, prompt: str, prior: list[dict[str, str]]) -> str:
        agent = Agent(
            name="bench",
            instructions="Answer briefly.",
            tools=[activity_as_tool(get_weather, start_to_close_timeout=TIMEOUT)],
        )
        items: list[Any] = [{"role": m["role"], "content": m["text"]} for m in prior]
        items.append({"role": "user", "content": prompt})
        result = await Runner.run(agent, input=items)
        return str(result.final_output)


async def connect(address: str) -> Client:
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=TIMEOUT),
        model_provider=ScriptedProvider(),
    )
    return await Client.connect(address, plugins=[plugin])


def worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client, task_queue=task_queue, workflows=[OpenAIAgentsTurn], activities=[get_weather]
    )


async def turn(
    client: Client, task_queue: str, workflow_id: str, prompt: str, prior: list[Any]
) -> str:
    return await client.execute_workflow(
        OpenAIAgentsTurn.run, args=[prompt, prior], id=workflow_id, task_queue=task_queue
    )
