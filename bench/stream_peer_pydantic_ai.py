"""The pydantic-ai peer on its streaming path, for ``bench.ttft`` and ``bench.pace`` (peers'
venv only; served by ``bench.stream_peers``).

pydantic-ai's documented Temporal streaming path (``pydantic_ai.durable_exec.temporal``):
``TemporalDurability(event_stream_topic=WorkflowStreamTopic(...))`` installs its
``workflow_stream_event_handler`` as the agent's event stream handler, which runs inside the
model-request activity and publishes each event to that topic of a Temporal
``workflow_streams`` stream (``AgentEventStream``, hosted by the workflow), flushed every
``batch_interval`` (the worker's ``STREAM_PEER_BATCH_MS``); the workflow publishes its own
events and the terminal result. The model is pydantic-ai's own ``AnthropicModel`` with a
provider at the local mock (``ANTHROPIC_BASE_URL``). The agent is built at import, as the
workflow class names it, its tools fixed then (a Temporal agent's cannot change at run
time): ``get_weather``, the agent's tool, where the worker serves ``bench.pace``
(``STREAM_PEER_TOOLS``); none for ``bench.ttft``. One agent only: the sandbox re-imports
this module for every workflow run, and building an agent takes some 25 ms.

The client side of ``bench.ttft`` (``bench.stream_peers client``): ``events`` reads
``stream_agent_events``, which acknowledges the terminal event (the workflow waits for that),
so the client reads to the end; ``is_text`` picks the first text (a ``PartStartEvent`` of a
``TextPart`` with text, or a ``TextPartDelta``). ``bench.pace`` subscribes from the
project's interpreter instead and sends the acknowledgement itself (``bench.pace.peer_turn``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, ClassVar

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import (
    AgentEventStream,
    PydanticAIPlugin,
    PydanticAIWorkflow,
    TemporalDurability,
    WorkflowStreamTopic,
    stream_agent_events,
)
from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from bench.pace_tools import weather
    from bench.pydantic_ai_history import history
    from bench.stream_peers import KEY, TOPIC, batch_interval, with_tools

MODEL = "claude-sonnet-4-5"  # any name: the local server answers every one
READ_TO_END = True
"""``stream_agent_events`` acknowledges the terminal event; the workflow waits for it."""


provider = AnthropicProvider(
    base_url=os.environ.get("ANTHROPIC_BASE_URL", "http://127.0.0.1:1"), api_key=KEY
)
topic = WorkflowStreamTopic(TOPIC, batch_interval=batch_interval())
agent: Any = Agent(
    AnthropicModel(MODEL, provider=provider),
    name="bench_stream",
    instructions="Answer briefly.",
    capabilities=[TemporalDurability(event_stream_topic=topic)],
)


async def get_weather(location: str) -> str:
    """Current weather for a location."""
    return weather(location)


if with_tools():
    agent.tool_plain(name="get_weather")(get_weather)


@workflow.defn(name="PydanticAIStreamedTurn")
class PydanticAIStreamedTurn(PydanticAIWorkflow):
    __pydantic_ai_agents__: ClassVar = [agent]

    @workflow.init
    def __init__(self, prompt: str, prior: list[dict[str, str]]) -> None:
        self.events = AgentEventStream()

    @workflow.run
    async def run(self, prompt: str, prior: list[dict[str, str]]) -> str:
        async with self.events:
            result = await agent.run(prompt, message_history=history(prior))
        return str(result.output)


async def connect(address: str, worker: bool) -> Client:
    """A client with the plugin (its data converter), the worker's or the subscriber's."""
    return await Client.connect(address, plugins=[PydanticAIPlugin()])


def worker(client: Client, task_queue: str) -> Worker:
    return Worker(client, task_queue=task_queue, workflows=[PydanticAIStreamedTurn])


def events(
    client: Client, handle: WorkflowHandle[Any, Any], cooldown: timedelta
) -> AsyncIterator[Any]:
    return stream_agent_events(client, handle, TOPIC, poll_cooldown=cooldown)


def is_text(event: Any) -> bool:
    if isinstance(event, PartStartEvent):
        return isinstance(event.part, TextPart) and bool(event.part.content)
    return isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta)
