"""Agent tools for the sub-agent tests (``TURNS_TOOLS=tests.support.tools,tests.support.agent_tools``).

Each sub-agent plays a demo script the test writes into the workers' ``TURNS_DEMO_DIR``
(``research.json``, ``asker.json``, ``outer.json``) and records its hooks in ``TEST_HOOK_LOG`` under its own
names, so a test tells the child's hooks from the worker's.
"""

from __future__ import annotations

from typing import Any

from durable_turns import ChatResponseResult, TurnContext, TurnHooks, agent_tool
from tests.support.hooks import record


class Researcher(TurnHooks):
    """Research one question with the add tool; answer in one line."""

    system_prompt = "You are the researcher sub-agent."

    async def before_turn(self, ctx: TurnContext) -> Any:
        record(
            "research.before_turn",
            conversation_id=ctx.conversation_id,
            tools=[t.name for t in ctx.tools],
            system=ctx.system,
            model=ctx.model,
            metadata=ctx.metadata,
            messages=[m.text for m in ctx.messages],
        )
        return None

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        record(
            "research.on_chat_response",
            conversation_id=result.conversation_id,
            status=result.status,
        )


research = agent_tool("research", Researcher, model="demo:research.json", tools=["add", "slow"])

asker = agent_tool(
    "asker",
    description="A sub-agent that asks the user things.",
    model="demo:asker.json",
    tools=["where_am_i", "wipe_disk"],
    system="You are the asker sub-agent.",
)

outer = agent_tool(
    "outer",
    description="A sub-agent that asks the asker sub-agent.",
    model="demo:outer.json",
    tools=["asker"],
    system="You are the outer sub-agent.",
)
