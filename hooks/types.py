"""Contexts, configs and decisions of the lifecycle hooks (Think's contract, snake_case).

Contexts are what a hook receives: plain dataclasses that live only inside the activity that
calls the hook. Configs and decisions are what a hook returns: pydantic models, because they
are recorded (in the transcript store or in workflow history) and must survive a crash.
Functions cannot cross a workflow boundary, so what Think takes as a function is
declarative here: stop conditions, models as ``provider:model`` ids, tools by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from durable_turns.contract import StopCondition
from durable_turns.messages import (
    Message,
    ReasoningPart,
    StreamPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)

ChatErrorClassification = Literal["context_overflow", "rate_limit", "transient", "fatal", "unknown"]
ErrorStage = Literal["parse", "persist", "turn", "stream", "recovery", "transcript", "tool"]


class ToolSpec(BaseModel):
    """What the model sees of a tool. A spec with no executor on the worker is a client tool."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


ToolChoice = Literal["auto", "none", "required"] | dict[str, str]
"""``"auto" | "none" | "required"`` or ``{"type": "tool", "tool_name": NAME}``."""


class TimeoutConfig(BaseModel):
    total_ms: int | None = None
    chunk_ms: int | None = None


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class TurnConfig(_Config):
    """``before_turn``'s return: every field optional; return only what you change."""

    model: str | None = None
    system: str | None = None
    messages: list[Message] | None = None
    tools: list[str | ToolSpec] | None = None
    """Extra tools (additive): registered tool names, or specs of client tools."""
    active_tools: list[str] | None = None
    tool_choice: ToolChoice | None = None
    max_steps: int | None = Field(default=None, ge=1)
    stop_when: list[StopCondition] | None = None
    """Additive to ``max_steps``: the loop ends when any condition matches."""
    send_reasoning: bool | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop_sequences: list[str] | None = None
    seed: int | None = None
    max_retries: int | None = Field(default=None, ge=0)
    timeout: TimeoutConfig | None = None
    chat_stream_stall_timeout_ms: int | None = Field(default=None, ge=0)
    headers: dict[str, str] | None = None
    provider_options: dict[str, Any] | None = None
    output: dict[str, Any] | None = None
    """Structured output: a JSON schema, or a pydantic model class (converted on return)."""
    experimental_transform: list[str] | None = None
    """Names of stream transforms registered on the worker, applied in order."""

    @model_validator(mode="before")
    @classmethod
    def _output_model(cls, data: Any) -> Any:
        if isinstance(data, dict):
            out = data.get("output")
            if isinstance(out, type) and issubclass(out, BaseModel):
                data = {**data, "output": out.model_json_schema()}
            transform = data.get("experimental_transform")
            if isinstance(transform, str):
                data = {**data, "experimental_transform": [transform]}
            stop = data.get("stop_when")
            if isinstance(stop, StopCondition | dict):
                data = {**data, "stop_when": [stop]}
        return data


class StepConfig(_Config):
    """``before_step``'s return: overrides for this step only."""

    model: str | None = None
    tool_choice: ToolChoice | None = None
    active_tools: list[str] | None = None
    system: str | None = None
    messages: list[Message] | None = None
    experimental_context: Any = None
    provider_options: dict[str, Any] | None = None


class ToolCallDecision(_Config):
    """``before_tool_call``'s return. ``None`` means allow."""

    action: Literal["allow", "block", "substitute"] = "allow"
    input: Any = None
    """With allow: the substituted input (validated against the tool's schema)."""
    reason: str | None = None
    output: Any = None

    @classmethod
    def allow(cls, input: Any = None) -> ToolCallDecision:
        return cls(action="allow", input=input)

    @classmethod
    def block(cls, reason: str | None = None) -> ToolCallDecision:
        return cls(action="block", reason=reason)

    @classmethod
    def substitute(cls, output: Any) -> ToolCallDecision:
        return cls(action="substitute", output=output)


def has_tool_call(tool_name: str) -> StopCondition:
    """Stop the loop after a step that called ``tool_name``."""
    return StopCondition(kind="has_tool_call", tool_name=tool_name)


def step_count_is(count: int) -> StopCondition:
    """Stop the loop once ``count`` steps have run."""
    return StopCondition(kind="step_count_is", count=count)


# --- contexts ------------------------------------------------------------------------------


@dataclass
class TurnContext:
    """``before_turn``'s argument: the fully assembled context of the turn."""

    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    model: str
    continuation: bool
    body: dict[str, Any]
    request_id: str
    conversation_id: str
    turn_number: int
    is_cancelled: Callable[[], bool] = lambda: False
    """True once the turn has been cancelled (``cancelChat``)."""


@dataclass
class StepResult:
    """One finished step, as ``on_step_finish`` and ``PrepareStepContext.steps`` see it."""

    step_number: int
    text: str = ""
    reasoning: list[ReasoningPart] = field(default_factory=list)
    tool_calls: list[ToolCallPart] = field(default_factory=list)
    tool_results: list[ToolResultPart] = field(default_factory=list)
    finish_reason: str = "stop"
    raw_finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    provider_metadata: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    response: dict[str, Any] = field(default_factory=dict)
    files: list[Any] = field(default_factory=list)
    sources: list[Any] = field(default_factory=list)

    @property
    def reasoning_text(self) -> str | None:
        text = "".join(r.text for r in self.reasoning)
        return text or None


StepContext = StepResult


@dataclass
class PrepareStepContext:
    """``before_step``'s argument."""

    steps: list[StepResult]
    step_number: int
    model: str
    messages: list[Message]
    experimental_context: Any = None


@dataclass
class ToolCallContext:
    """``before_tool_call``'s argument."""

    tool_call_id: str
    tool_name: str
    input: Any
    step_number: int
    messages: list[Message]
    type: str = "tool-call"
    dynamic: bool = False
    provider_metadata: dict[str, Any] | None = None
    is_cancelled: Callable[[], bool] = lambda: False


@dataclass
class ToolCallResultContext:
    """``after_tool_call``'s argument. ``input`` is what the model emitted."""

    tool_call_id: str
    tool_name: str
    input: Any
    step_number: int
    messages: list[Message]
    duration_ms: float
    success: bool
    output: Any = None
    error: Any = None
    type: str = "tool-call"
    dynamic: bool = False


@dataclass
class ChunkContext:
    """``on_chunk``'s argument."""

    chunk: StreamPart
    step_number: int = 0
    request_id: str = ""


@dataclass
class ChatResponseResult:
    """``on_chat_response``'s argument."""

    message: Message
    request_id: str
    continuation: bool
    status: Literal["completed", "error", "aborted"]
    error: str | None = None
    conversation_id: str = ""
    turn_number: int = 0


@dataclass
class ChatErrorContext:
    """Where a turn failed, for ``classify_chat_error`` and ``on_chat_error``."""

    stage: ErrorStage
    request_id: str | None = None
    messages_persisted: bool = False
    classification: ChatErrorClassification | None = None


@dataclass
class ContextOverflowConfig:
    """Context-overflow recovery: reactive compact-and-retry, and proactive compaction."""

    reactive: bool = False
    max_retries: int = 1
    max_input_tokens: int | None = None
    """Proactive: compact before a step whose context reached ``max_input_tokens * headroom``."""
    headroom: float = 0.9
    max_compactions: int = 1
