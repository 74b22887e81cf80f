"""``bench.ttft``'s OpenAI Agents SDK peer on its streaming path (peers' venv only).

The Temporal integration's documented streaming path (``temporalio.openai_agents``,
"Streaming"): the workflow hosts a ``WorkflowStream`` and runs ``Runner.run_streamed``; the
plugin's ``ModelActivityParameters.streaming_topic`` makes each model call the streaming
model activity (``invoke_model_activity_streaming``), which publishes every native OpenAI
Responses event to that topic as ``Model.stream_response`` yields it, flushed every
``streaming_batch_interval``; the client subscribes with ``WorkflowStreamClient`` and takes
the first ``response.output_text.delta``. The model is the SDK's own
``OpenAIResponsesModel`` on an ``AsyncOpenAI`` pointed at the local mock.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no trace export (no network)

from agents import Agent, Model, ModelProvider, OpenAIResponsesModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI
from temporalio import workflow
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamClient
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker

set_tracing_disabled(True)

TOPIC = "events"
MODEL = "gpt-5.5"  # any name: the local server answers every one
TIMEOUT = timedelta(seconds=60)


class MockResponses(ModelProvider):
    """The SDK's Responses model on a client of the local mock (``OPENAI_BASE_URL``)."""

    def __init__(self) -> None:
        self._client = AsyncOpenAI(
            base_url=os.environ["OPENAI_BASE_URL"], api_key="test", max_retries=0
        )

    def get_model(self, model_name: str | None) -> Model:
        return OpenAIResponsesModel(model=model_name or MODEL, openai_client=self._client)


@workflow.defn(name="OpenAIAgentsStreamedTurn")
class OpenAIAgentsStreamedTurn:
    @workflow.init
    def __init__(self, prompt: str, prior: list[dict[str, str]]) -> None:
        self.stream = WorkflowStream()

    @workflow.run
    async def run(self, prompt: str, prior: list[dict[str, str]]) -> str:
        agent = Agent(name="bench", instructions="Answer briefly.", model=MODEL)
        items: list[Any] = [{"role": m["role"], "content": m["text"]} for m in prior]
        items.append({"role": "user", "content": prompt})
        result = Runner.run_streamed(agent, input=items)
        async for _ in result.stream_events():
            pass
        return str(result.final_output)


def plugin(batch_ms: float, model: bool) -> OpenAIAgentsPlugin:
    params = ModelActivityParameters(
        start_to_close_timeout=TIMEOUT,
        heartbeat_timeout=timedelta(seconds=10),
        streaming_topic=TOPIC,
        streaming_batch_interval=timedelta(milliseconds=batch_ms),
    )
    return OpenAIAgentsPlugin(
        model_params=params, model_provider=MockResponses() if model else None
    )


async def connect(address: str, batch_ms: float, model: bool = True) -> Client:
    """A client with the plugin (its data converter); ``model``: the worker's, with the mock."""
    return await Client.connect(address, plugins=[plugin(batch_ms, model)])


def worker(client: Client, task_queue: str) -> Worker:
    return Worker(client, task_queue=task_queue, workflows=[OpenAIAgentsStreamedTurn])


async def turn(
    client: Client,
    task_queue: str,
    workflow_id: str,
    prior: list[dict[str, str]],
    cooldown_ms: float,
) -> float:
    """Seconds from the client's call to the first text delta; then the turn is awaited."""
    began = time.perf_counter()
    handle = await client.start_workflow(
        OpenAIAgentsStreamedTurn.run, args=["hi", prior], id=workflow_id, task_queue=task_queue
    )
    events = WorkflowStreamClient.create(client, workflow_id).topic(TOPIC)
    took: float | None = None
    async for item in events.subscribe(poll_cooldown=timedelta(milliseconds=cooldown_ms)):
        if _kind(item.data) == "response.output_text.delta":
            took = time.perf_counter() - began
            break
    await handle.result()
    if took is None:
        raise RuntimeError("the stream ended without a text delta")
    return took


def _kind(event: Any) -> Any:
    return event.get("type") if isinstance(event, dict) else getattr(event, "type", None)
