"""The public hook API: subclass ``TurnHooks`` and point the worker at it with
``turns worker --hooks mypackage.hooks:MyHooks`` (or ``TURNS_HOOKS=...``).
"""

from durable_turns.hooks.base import TurnHooks
from durable_turns.hooks.classifier import (
    CONTEXT_OVERFLOW_PATTERN,
    default_context_overflow_classifier,
)
from durable_turns.hooks.extensions import Extension
from durable_turns.hooks.session import ContextBlock, Session, approximate_token_count
from durable_turns.hooks.types import (
    CacheConfig,
    ChatErrorClassification,
    ChatErrorContext,
    ChatRecoveryContext,
    ChatResponseResult,
    ChunkContext,
    ContextOverflowConfig,
    PrepareStepContext,
    RecoveryDecision,
    RepairedToolCall,
    StepConfig,
    StepContext,
    StepResult,
    TimeoutConfig,
    ToolCallContext,
    ToolCallDecision,
    ToolCallProblem,
    ToolCallRepairContext,
    ToolCallResultContext,
    ToolSpec,
    TruncationConfig,
    TurnConfig,
    TurnContext,
    has_tool_call,
    step_count_is,
)

__all__ = [
    "CONTEXT_OVERFLOW_PATTERN",
    "CacheConfig",
    "ChatErrorClassification",
    "ChatErrorContext",
    "ChatRecoveryContext",
    "ChatResponseResult",
    "ChunkContext",
    "ContextBlock",
    "ContextOverflowConfig",
    "Extension",
    "PrepareStepContext",
    "RecoveryDecision",
    "RepairedToolCall",
    "Session",
    "StepConfig",
    "StepContext",
    "StepResult",
    "TimeoutConfig",
    "ToolCallContext",
    "ToolCallDecision",
    "ToolCallProblem",
    "ToolCallRepairContext",
    "ToolCallResultContext",
    "ToolSpec",
    "TruncationConfig",
    "TurnConfig",
    "TurnContext",
    "TurnHooks",
    "approximate_token_count",
    "default_context_overflow_classifier",
    "has_tool_call",
    "step_count_is",
]
