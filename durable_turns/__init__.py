"""durable-turns: a chat-turn engine where every turn is a Temporal workflow.

Everything a user needs is importable from here::

    from durable_turns import TurnsClient, TurnHooks, TurnConfig, tool, run
    from durable_turns import DurableTurnsPlugin   # the engine in a team's own worker

The package is laid out in floors, each importing only from the floors below it:

* ``errors``: every exception the engine raises, under ``DurableTurnsError``;
* ``contract``, ``messages``: the wire contract (names, I/O types, limits) and messages;
* ``config``, ``tools``, ``transforms``, ``hooks``: what a user configures and extends;
* ``store``, ``streams``, ``models``: the transcript store, live chunk streams, providers;
* ``activities``, ``workflows``: the turn itself (I/O and deterministic code);
* ``runtime``, ``client``, ``cli``: the worker, the Python client and the ``turns`` command.

Names resolve lazily (PEP 562), so importing one submodule never drags in the rest, and the
workflow sandbox can re-import ``durable_turns.contract`` without loading the client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    # the client and the wire contract
    "TurnsClient": "durable_turns.client",
    "run": "durable_turns.entry",
    "TurnResult": "durable_turns.contract",
    "SubmitMessages": "durable_turns.contract",
    "Message": "durable_turns.messages",
    "user_message": "durable_turns.messages",
    "Settings": "durable_turns.config",
    "DurableTurnsError": "durable_turns.errors",
    "DurableTurnsPlugin": "durable_turns._temporal.plugin",
    # tools and stream transforms
    "Tool": "durable_turns.tools",
    "ToolContext": "durable_turns.tools",
    "ToolRegistry": "durable_turns.tools",
    "client_tool": "durable_turns.tools",
    "tool": "durable_turns.tools",
    "AgentTask": "durable_turns.agents",
    "agent_tool": "durable_turns.agents",
    "stream_transform": "durable_turns.transforms",
    # hooks
    "TurnHooks": "durable_turns.hooks",
    "CONTEXT_OVERFLOW_PATTERN": "durable_turns.hooks",
    "CacheConfig": "durable_turns.hooks",
    "TruncationConfig": "durable_turns.hooks",
    "ChatErrorClassification": "durable_turns.hooks",
    "ChatErrorContext": "durable_turns.hooks",
    "ChatRecoveryContext": "durable_turns.hooks",
    "ChatResponseResult": "durable_turns.hooks",
    "ChunkContext": "durable_turns.hooks",
    "ContextBlock": "durable_turns.hooks",
    "ContextOverflowConfig": "durable_turns.hooks",
    "Extension": "durable_turns.hooks",
    "PrepareStepContext": "durable_turns.hooks",
    "RecoveryDecision": "durable_turns.hooks",
    "RepairedToolCall": "durable_turns.hooks",
    "Session": "durable_turns.hooks",
    "StepConfig": "durable_turns.hooks",
    "StepContext": "durable_turns.hooks",
    "StepResult": "durable_turns.hooks",
    "TimeoutConfig": "durable_turns.hooks",
    "ToolCallContext": "durable_turns.hooks",
    "ToolCallDecision": "durable_turns.hooks",
    "ToolCallRepairContext": "durable_turns.hooks",
    "ToolCallResultContext": "durable_turns.hooks",
    "ToolSpec": "durable_turns.hooks",
    "TurnConfig": "durable_turns.hooks",
    "TurnContext": "durable_turns.hooks",
    "approximate_token_count": "durable_turns.hooks",
    "default_context_overflow_classifier": "durable_turns.hooks",
    "has_tool_call": "durable_turns.hooks",
    "step_count_is": "durable_turns.hooks",
}

__all__ = [
    "CONTEXT_OVERFLOW_PATTERN",
    "AgentTask",
    "CacheConfig",
    "ChatErrorClassification",
    "ChatErrorContext",
    "ChatRecoveryContext",
    "ChatResponseResult",
    "ChunkContext",
    "ContextBlock",
    "ContextOverflowConfig",
    "DurableTurnsError",
    "DurableTurnsPlugin",
    "Extension",
    "Message",
    "PrepareStepContext",
    "RecoveryDecision",
    "RepairedToolCall",
    "Session",
    "Settings",
    "StepConfig",
    "StepContext",
    "StepResult",
    "SubmitMessages",
    "TimeoutConfig",
    "Tool",
    "ToolCallContext",
    "ToolCallDecision",
    "ToolCallRepairContext",
    "ToolCallResultContext",
    "ToolContext",
    "ToolRegistry",
    "ToolSpec",
    "TruncationConfig",
    "TurnConfig",
    "TurnContext",
    "TurnHooks",
    "TurnResult",
    "TurnsClient",
    "agent_tool",
    "approximate_token_count",
    "client_tool",
    "default_context_overflow_classifier",
    "has_tool_call",
    "run",
    "step_count_is",
    "stream_transform",
    "tool",
    "user_message",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'durable_turns' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from durable_turns._temporal.plugin import DurableTurnsPlugin
    from durable_turns.agents import AgentTask, agent_tool
    from durable_turns.client import TurnsClient
    from durable_turns.config import Settings
    from durable_turns.contract import SubmitMessages, TurnResult
    from durable_turns.entry import run
    from durable_turns.errors import DurableTurnsError
    from durable_turns.hooks import (
        CONTEXT_OVERFLOW_PATTERN,
        CacheConfig,
        ChatErrorClassification,
        ChatErrorContext,
        ChatRecoveryContext,
        ChatResponseResult,
        ChunkContext,
        ContextBlock,
        ContextOverflowConfig,
        Extension,
        PrepareStepContext,
        RecoveryDecision,
        RepairedToolCall,
        Session,
        StepConfig,
        StepContext,
        StepResult,
        TimeoutConfig,
        ToolCallContext,
        ToolCallDecision,
        ToolCallRepairContext,
        ToolCallResultContext,
        ToolSpec,
        TruncationConfig,
        TurnConfig,
        TurnContext,
        TurnHooks,
        approximate_token_count,
        default_context_overflow_classifier,
        has_tool_call,
        step_count_is,
    )
    from durable_turns.messages import Message, user_message
    from durable_turns.tools import Tool, ToolContext, ToolRegistry, client_tool, tool
    from durable_turns.transforms import stream_transform
