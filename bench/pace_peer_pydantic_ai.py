"""``bench.pace``'s pydantic-ai peer (see ``bench.pace_peers``): ``TemporalDurability`` with
an ``event_stream_topic``, ``AnthropicModel`` at the mock, ``get_weather`` the agent's tool."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import (
    AgentEventStream,
    PydanticAIPlugin,
    PydanticAIWorkflow,
    TemporalDurability,
    WorkflowStreamTopic,
)
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from bench.pace_peers import BATCH, KEY, TOPIC

with workflow.unsafe.imports_passed_through():
    from bench.pace_tools import weather

ANTHROPIC_MODEL = "claude-sonnet-4-5"


pydantic_agent: Any = Agent(
    AnthropicModel(
        ANTHROPIC_MODEL,
        provider=AnthropicProvider(base_url=os.environ.get("ANTHROPIC_BASE_URL"), api_key=KEY),
    ),
    name="pace",
    instructions="Answer briefly.",
    capabilities=[
        TemporalDurability(event_stream_topic=WorkflowStreamTopic(TOPIC, batch_interval=BATCH))
    ],
)


@pydantic_agent.tool_plain(name="get_weather")
async def pydantic_get_weather(location: str) -> str:
    """Current weather for a location."""
    return weather(location)


@workflow.defn(name="PacePydanticAITurn")
class PacePydanticAITurn(PydanticAIWorkflow):
    __pydantic_ai_agents__: ClassVar = [pydantic_agent]

    @workflow.init
    def __init__(self, prompt: str) -> None:
        self.events = AgentEventStream()

    @workflow.run
    async def run(self, prompt: str) -> str:
        async with self.events:
            result = await pydantic_agent.run(prompt)
        return str(result.output)


async def worker(address: str, task_queue: str) -> Worker:
    client = await Client.connect(address, plugins=[PydanticAIPlugin()])
    return Worker(client, task_queue=task_queue, workflows=[PacePydanticAITurn])
