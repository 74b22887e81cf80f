"""Whole-engine provider tests: a worker wired to ``testkit/llm_server.py`` for both providers.

``ProviderHooks`` is ``RecordingHooks`` (its body-driven ``turn_config`` / ``step_configs``
and its hook log) plus a ``step_record`` line per finished step with what ``StepContext``
says of it: the request metadata (model, tools, tool choice, provider options, attempt) and
the reasoning parts.
"""

from __future__ import annotations

from typing import Any

from durable_turns.hooks import StepContext
from testkit.llm_server import LLMServer
from tests.support.harness import Harness, WorkerProcess
from tests.support.hooks import RecordingHooks, record

ANTHROPIC_KEY = "sk-ant-api03-TESTSECRETKEY0123456789abcdef"
OPENAI_KEY = "sk-proj-TESTSECRETKEY0123456789abcdefghij"
TOOLS = "tests.support.tools,tests.support.hooks"
PROVIDER_TOOLS = f"{TOOLS},tests.support.provider_tools"


class ProviderHooks(RecordingHooks):
    async def on_step_finish(self, ctx: StepContext) -> None:
        await super().on_step_finish(ctx)
        record(
            "step_record",
            step=ctx.step_number,
            request=ctx.request,
            reasoning=[r.model_dump() for r in ctx.reasoning],
            tool_calls=[(c.tool_call_id, c.tool_name, c.input) for c in ctx.tool_calls],
            finish_reason=ctx.finish_reason,
            response=ctx.response,
        )


def start_provider_worker(
    harness: Harness, server: LLMServer, *, tools: str = PROVIDER_TOOLS, **env: str
) -> WorkerProcess:
    """A worker whose ``anthropic:`` and ``openai:`` providers talk to the local server."""
    return harness.start_worker(
        ANTHROPIC_BASE_URL=server.base_url,
        ANTHROPIC_API_KEY=ANTHROPIC_KEY,
        OPENAI_BASE_URL=server.openai_base_url,
        OPENAI_API_KEY=OPENAI_KEY,
        TURNS_HOOKS="tests.support.provider_hooks:ProviderHooks",
        TURNS_TOOLS=tools,
        **env,
    )


def api_requests(server: LLMServer) -> list[Any]:
    """The recorded model calls (control requests left out), in order."""
    return [r for r in server.requests if r.path.startswith("/v1/")]
