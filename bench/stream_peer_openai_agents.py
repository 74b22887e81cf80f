"""The OpenAI Agents SDK peer on its streaming path, for ``bench.ttft`` and ``bench.pace``
(peers' venv only; served by ``bench.stream_peers``).

The Temporal integration's documented streaming path (``temporalio.openai_agents``,
"Streaming"): the workflow hosts a ``WorkflowStream`` and runs ``Runner.run_streamed``; the
plugin's ``ModelActivityParameters.streaming_topic`` makes each model call the streaming
model activity (``invoke_model_activity_streaming``), which publishes every native OpenAI
Responses event to that topic as ``Model.stream_response`` yields it, flushed every
``streaming_batch_interval`` (the worker's ``STREAM_PEER_BATCH_MS``). The model is the SDK's
own ``OpenAIResponsesModel`` on an ``AsyncOpenAI`` at the local mock
(``OpenAIProvider(use_responses=True)``, ``OPENAI_BASE_URL``). Where the worker serves
``bench.pace`` (``STREAM_PEER_TOOLS``) the agent has ``get_weather``, an activity
(``activity_as_tool``); for ``bench.ttft`` no tools.

The client side of ``bench.ttft`` (``bench.stream_peers client``): ``events`` subscribes with
``WorkflowStreamClient``, ``is_text`` picks the first ``response.output_text.delta``.
``bench.pace`` subscribes from the project's interpreter instead (``bench.pace.peer_turn``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no trace export (no network)

from agents import Agent, OpenAIProvider, Runner, set_tracing_disabled
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamClient
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.openai_agents.workflow import activity_as_tool
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from bench.pace_tools import weather
    from bench.stream_peers import KEY, TIMEOUT, TOPIC, batch_interval, with_tools

set_tracing_disabled(True)

MODEL = "gpt-5"  # any name: the local server answers every one
TOOLS = with_tools()
READ_TO_END = False
"""The client may stop at the first text: nothing waits for it to read on."""


@activity.defn(name="stream_peer_get_weather")
async def get_weather(location: str) -> str:
    """Current weather for a location."""
    return weather(location)


@workflow.defn(name="OpenAIAgentsStreamedTurn")
class OpenAIAgentsStreamedTurn:
    @workflow.init
    def __init__(self, prompt: str, prior: list[dict[str, str]]) -> None:
        self.stream = WorkflowStream()

    @workflow.run
    async def run(self, prompt: str, prior: list[dict[str, str]]) -> str:
        agent: Agent[Any] = Agent(
            name="bench",
            instructions="Answer briefly.",
            model=MODEL,
            tools=[activity_as_tool(get_weather, start_to_close_timeout=TIMEOUT)] if TOOLS else [],
        )
        items: list[Any] = [{"role": m["role"], "content": m["text"]} for m in prior]
        items.append({"role": "user", "content": prompt})
        result = Runner.run_streamed(agent, input=items)
        async for _ in result.stream_events():
            pass
        return str(result.final_output)


async def connect(address: str, worker: bool) -> Client:
    """A client with the plugin (its data converter); ``worker``: with the mock's model."""
    params = ModelActivityParameters(
        start_to_close_timeout=TIMEOUT,
        streaming_topic=TOPIC,
        streaming_batch_interval=batch_interval(),
    )
    provider = (
        OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"], api_key=KEY, use_responses=True)
        if worker
        else None
    )
    plugin = OpenAIAgentsPlugin(model_params=params, model_provider=provider)
    return await Client.connect(address, plugins=[plugin])


def worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[OpenAIAgentsStreamedTurn],
        activities=[get_weather],
    )


def events(
    client: Client, handle: WorkflowHandle[Any, Any], cooldown: timedelta
) -> AsyncIterator[Any]:
    """The raw Responses events the streaming model activity publishes."""
    topic = WorkflowStreamClient.create(client, handle.id).topic(TOPIC)
    return (item.data async for item in topic.subscribe(poll_cooldown=cooldown))


def is_text(event: Any) -> bool:
    kind = event.get("type") if isinstance(event, dict) else getattr(event, "type", None)
    return kind == "response.output_text.delta"
