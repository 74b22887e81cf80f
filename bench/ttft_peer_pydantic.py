"""``bench.ttft``'s pydantic-ai peer on its streaming path (peers' venv only).

pydantic-ai's documented Temporal streaming path (``pydantic_ai.durable_exec.temporal``):
``TemporalDurability(event_stream_topic=WorkflowStreamTopic(...))`` installs its
``workflow_stream_event_handler`` as the agent's event stream handler, which runs inside the
model-request activity and publishes each event to that topic of a Temporal
``workflow_streams`` stream (``AgentEventStream``, hosted by the workflow), flushed every
``batch_interval``; the client reads them with ``stream_agent_events`` and takes the first
text (a ``PartStartEvent`` of a ``TextPart`` with text, or a ``TextPartDelta``). The model is
pydantic-ai's own ``AnthropicModel`` with a provider pointed at the local mock.

The worker's batch interval is ``TTFT_PEER_BATCH_MS`` (the agent is built at import, as the
workflow class names it; ``ANTHROPIC_BASE_URL``: the mock).
"""

from __future__ import annotations

import os
import time
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
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    UserPromptPart,
)
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

TOPIC = "events"
MODEL = "claude-sonnet-4-5"  # any name: the local server answers every one
BATCH = timedelta(milliseconds=float(os.environ.get("TTFT_PEER_BATCH_MS", "100")))

model = AnthropicModel(
    MODEL,
    provider=AnthropicProvider(
        base_url=os.environ.get("ANTHROPIC_BASE_URL", "http://127.0.0.1:1"), api_key="test"
    ),
)
agent = Agent(
    model,
    name="bench_stream",
    capabilities=[
        TemporalDurability(event_stream_topic=WorkflowStreamTopic(TOPIC, batch_interval=BATCH))
    ],
)


@workflow.defn(name="PydanticAIStreamedTurn")
class PydanticAIStreamedTurn(PydanticAIWorkflow):
    __pydantic_ai_agents__: ClassVar = [agent]

    @workflow.init
    def __init__(self, prompt: str, prior: list[dict[str, str]]) -> None:
        self.events = AgentEventStream()

    @workflow.run
    async def run(self, prompt: str, prior: list[dict[str, str]]) -> str:
        history: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart(m["text"])])
            if m["role"] == "user"
            else ModelResponse(parts=[TextPart(m["text"])])
            for m in prior
        ]
        async with self.events:
            result = await agent.run(prompt, message_history=history)
        return str(result.output)


async def connect(address: str) -> Client:
    return await Client.connect(address, plugins=[PydanticAIPlugin()])


def worker(client: Client, task_queue: str) -> Worker:
    return Worker(client, task_queue=task_queue, workflows=[PydanticAIStreamedTurn])


def is_text(event: Any) -> bool:
    if isinstance(event, PartStartEvent):
        return isinstance(event.part, TextPart) and bool(event.part.content)
    return isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta)


async def turn(
    client: Client,
    task_queue: str,
    workflow_id: str,
    prior: list[dict[str, str]],
    cooldown_ms: float,
) -> float:
    """Seconds from the client's call to the first text; then the run is read to its end (the
    subscriber's acknowledgment lets the workflow finish) and awaited."""
    began = time.perf_counter()
    handle = await client.start_workflow(
        "PydanticAIStreamedTurn", args=["hi", prior], id=workflow_id, task_queue=task_queue
    )
    took: float | None = None
    cooldown = timedelta(milliseconds=cooldown_ms)
    async for event in stream_agent_events(client, handle, TOPIC, poll_cooldown=cooldown):
        if took is None and is_text(event):
            took = time.perf_counter() - began
    await handle.result()
    if took is None:
        raise RuntimeError("the stream ended without text")
    return took
