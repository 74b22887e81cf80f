"""Peer: pydantic-ai's Temporal integration (``TemporalDurability``), with a scripted model.

Runs only in the peers' virtual environment (see ``bench/peers.py``). The model is a
``FunctionModel`` that plays the same script as the engine's demo model: ``steps=N`` in the
prompt means N - 1 calls of ``get_weather``, then a text answer. A turn is one workflow run
of the agent with the prior conversation as ``message_history``.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import (
    PydanticAIPlugin,
    PydanticAIWorkflow,
    TemporalDurability,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from bench.pydantic_ai_history import history

NAME = "pydantic-ai"
PACKAGES = ["pydantic_ai", "pydantic-ai-slim"]


def is_model_activity(name: str) -> bool:
    return name.endswith("__model_request")


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    def is_prompt(m: ModelMessage) -> bool:
        return isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts)

    start = max(i for i, m in enumerate(messages) if is_prompt(m))
    prompt = next(p for p in messages[start].parts if isinstance(p, UserPromptPart))
    steps = int(re.search(r"steps=(\d+)", str(prompt.content)).group(1))  # type: ignore[union-attr]
    taken = sum(isinstance(m, ModelResponse) for m in messages[start:])
    if taken < steps - 1:
        call = ToolCallPart("get_weather", {"city": "Oslo"}, tool_call_id=f"call_{taken}")
        return ModelResponse(parts=[TextPart("Checking."), call])
    return ModelResponse(parts=[TextPart("Here you are.")])


agent = Agent(FunctionModel(scripted), name="bench", capabilities=[TemporalDurability()])


@agent.tool_plain
async def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny, 20°C in {city}"


@workflow.defn(name="PydanticAITurn")
class PydanticAITurn(PydanticAIWorkflow):
    __pydantic_ai_agents__: ClassVar = [agent]

    @workflow.run
    async def run(self, prompt: str, prior: list[dict[str, str]]) -> str:
        result = await agent.run(prompt, message_history=history(prior))
        return str(result.output)


async def connect(address: str) -> Client:
    return await Client.connect(address, plugins=[PydanticAIPlugin()])


def worker(client: Client, task_queue: str) -> Worker:
    return Worker(client, task_queue=task_queue, workflows=[PydanticAITurn])


async def turn(
    client: Client, task_queue: str, workflow_id: str, prompt: str, prior: list[Any]
) -> str:
    return await client.execute_workflow(
        PydanticAITurn.run, args=[prompt, prior], id=workflow_id, task_queue=task_queue
    )
