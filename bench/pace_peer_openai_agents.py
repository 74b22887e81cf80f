"""``bench.pace``'s OpenAI Agents SDK peer (see ``bench.pace_peers``): ``Runner.run_streamed``
in a workflow, ``OpenAIResponsesModel`` at the mock, ``get_weather`` an activity."""

from __future__ import annotations

import os

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no trace export (no network)

from typing import Any

from agents import Agent, OpenAIProvider, Runner, set_tracing_disabled
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.openai_agents.workflow import activity_as_tool
from temporalio.worker import Worker

from bench.pace_peers import BATCH, KEY, TIMEOUT, TOPIC

with workflow.unsafe.imports_passed_through():
    from bench.pace_tools import weather

OPENAI_MODEL = "gpt-5"
set_tracing_disabled(True)


@activity.defn(name="pace_get_weather")
async def get_weather(location: str) -> str:
    """Current weather for a location."""
    return weather(location)


@workflow.defn(name="PaceOpenAIAgentsTurn")
class PaceOpenAIAgentsTurn:
    @workflow.init
    def __init__(self, prompt: str) -> None:
        self.stream = WorkflowStream()

    @workflow.run
    async def run(self, prompt: str) -> str:
        agent: Agent[Any] = Agent(
            name="pace",
            instructions="Answer briefly.",
            model=OPENAI_MODEL,
            tools=[activity_as_tool(get_weather, start_to_close_timeout=TIMEOUT)],
        )
        result = Runner.run_streamed(agent, input=prompt)
        async for _ in result.stream_events():
            pass
        return str(result.final_output)


async def worker(address: str, task_queue: str) -> Worker:
    provider = OpenAIProvider(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=KEY, use_responses=True
    )
    params = ModelActivityParameters(
        start_to_close_timeout=TIMEOUT, streaming_topic=TOPIC, streaming_batch_interval=BATCH
    )
    plugin = OpenAIAgentsPlugin(model_params=params, model_provider=provider)
    client = await Client.connect(address, plugins=[plugin])
    return Worker(
        client, task_queue=task_queue, workflows=[PaceOpenAIAgentsTurn], activities=[get_weather]
    )
