"""Contexts, configs and decisions of the lifecycle hooks (Think's contract, snake_case).

Contexts are what a hook receives: plain dataclasses that live only inside the activity that
calls the hook. Configs and decisions are what a hook returns: pydantic models, because they
are recorded (in the transcript store or in workflow history) and must survive a crash.
Functions cannot cross a workflow boundary, so what Think takes as a function is
declarative here: stop conditions, models as ``provider:model`` ids, tools by name.

Why it is long (about 600 lines): every type of the public hook API, the reference a hook
author reads; most of its lines are the docstrings of their fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from durable_turns.contract import RecoveryReason, StopCondition, ToolCallOutcome
from durable_turns.messages import (
    Message,
    Part,
    ReasoningPart,
    StreamPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    ToolSpec,
    Usage,
)

ChatErrorClassification = Literal["context_overflow", "rate_limit", "transient", "fatal", "unknown"]
ErrorStage = Literal["parse", "persist", "turn", "stream", "recovery", "transcript", "tool"]


class TimeoutConfig(BaseModel):
    """Time limits of a turn's model steps."""

    total_ms: int | None = Field(default=None, gt=0)
    """The longest one model step may take (its activity's start-to-close timeout)."""
    chunk_ms: int | None = Field(default=None, gt=0)
    """The longest silence between two chunks: the stall watchdog's timeout."""


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class CacheConfig(BaseModel):
    """Prompt caching of a turn or a step (on by default; see ``docs/costs.md``).

    ``False`` or ``"off"`` turns it off, ``"5m"`` / ``"1h"`` set the TTL, a dict sets fields.
    Anthropic: breakpoints on the tools, the system prompt, the end of the previous request
    and the end of this one. OpenAI caches stable prefixes by itself; the engine sends
    ``prompt_cache_key`` (the conversation id) so a conversation's requests meet its cache.
    ``provider_options={"cache": ...}`` (or under a provider's name) wins over this.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    ttl: Literal["5m", "1h"] | None = None
    """Anthropic's cache lifetime (None: the API's default, 5 minutes). A 1-hour write costs
    2x the input price instead of 1.25x; worth it when turns are more than 5 minutes apart."""
    key: str | None = None
    """OpenAI's ``prompt_cache_key`` (None: the conversation id)."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, bool):
            return {"enabled": data}
        if data in ("off", "none", "disabled"):
            return {"enabled": False}
        if data in ("on", "auto"):
            return {}
        if data in ("5m", "1h"):
            return {"ttl": data}
        return data

    def merged(self, other: CacheConfig | None) -> CacheConfig:
        """This config with ``other``'s explicitly set fields over it."""
        if other is None:
            return self
        return self.model_copy(update={k: getattr(other, k) for k in other.model_fields_set})


class TruncationConfig(BaseModel):
    """Think's ``truncateOlderMessages``: in messages older than the last ``keep_recent``,
    tool outputs are cut to ``tool_output_chars`` and texts to ``text_chars`` (on by default).

    ``False`` or ``"off"`` turns it off. To keep the prompt cache warm, the boundary moves in
    steps of ``every`` messages (``activities/truncation.py``): a message is truncated once,
    and its bytes stay the same from then on. ``every=1`` is Think's exact rule (the boundary
    moves each message, which rewrites the cached prefix near the end of every turn).
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    keep_recent: int = Field(default=4, ge=0)
    tool_output_chars: int = Field(default=500, ge=0)
    text_chars: int = Field(default=10_000, ge=0)
    every: int = Field(default=8, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, bool):
            return {"enabled": data}
        if data in ("off", "none", "disabled"):
            return {"enabled": False}
        return data


SAMPLING = (
    "max_output_tokens",
    "temperature",
    "top_p",
    "top_k",
    "presence_penalty",
    "frequency_penalty",
    "stop_sequences",
    "seed",
)
"""``TurnConfig``'s sampling settings: passed on to the model request (``ModelRequest``)
as they are."""


class TurnConfig(_Config):
    """``before_turn``'s return: every field optional; return only what you change.

    The whole config is recorded in the transcript store with the turn (not in workflow
    history), so a ``messages`` override of any size costs history nothing.
    """

    model: str | None = None
    """A ``provider:model`` id for this turn, e.g. ``"anthropic:claude-haiku-4-5"``."""
    system: str | None = None
    """Replaces the system prompt (from the session's context blocks or ``system_prompt``)."""
    messages: list[Message] | None = None
    """Replaces the assembled transcript as the turn's context (the transcript is untouched)."""
    tools: list[str | ToolSpec] | None = None
    """Extra tools (additive): names of registered tools (e.g. ``@tool(default=False)``
    ones), or ``ToolSpec``s of client tools. Cannot remove tools: use ``active_tools``."""
    active_tools: list[str] | None = None
    """Only these tools are offered to the model, and only these may run."""
    tool_choice: ToolChoice | None = None
    """``"auto" | "none" | "required"`` or ``{"type": "tool", "tool_name": NAME}``."""
    max_steps: int | None = Field(default=None, ge=1)
    """Model steps of this turn (default: the request's, else ``TURNS_MAX_STEPS``, 10)."""
    stop_when: list[StopCondition] | None = None
    """Additive to ``max_steps``: the loop ends after a step where any condition matches
    (``has_tool_call("name")``, ``step_count_is(n)``)."""
    send_reasoning: bool | None = None
    """False: reasoning is kept from what the client sees (``on_chunk``, the extensions'
    ``on_chunk`` and the stored assistant message). The model still gets its own reasoning
    back within the turn (providers require it), and ``on_step_finish`` still sees it."""
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop_sequences: list[str] | None = None
    seed: int | None = None
    max_retries: int | None = Field(default=None, ge=0)
    """Retries of a failed model step (transient errors, stalls, crashes); 0 = one attempt."""
    timeout: TimeoutConfig | None = None
    chat_stream_stall_timeout_ms: int | None = Field(default=None, ge=0)
    """The stall watchdog for this turn (0 disables it); wins over ``timeout.chunk_ms``."""
    headers: dict[str, str] | None = None
    """Extra HTTP headers of the provider request."""
    provider_options: dict[str, Any] | None = None
    """Provider settings; options under a provider's name reach only that provider."""
    output: dict[str, Any] | None = None
    """Structured output: a JSON schema, or a pydantic model class (converted on return).
    The final step's text must be JSON valid against it, else the turn ends with status
    ``"error"`` and error type ``"OutputValidationError"`` (through ``on_chat_error``)."""
    experimental_transform: list[str] | None = None
    """Names of stream transforms registered on the worker (``activities.transforms``),
    applied in order to each model step's stream before it is accumulated or observed."""
    cache: CacheConfig | None = None
    """Prompt caching (on by default): ``False``/``"off"``, ``"5m"``/``"1h"``, or a
    ``CacheConfig``. ``provider_options`` still win."""
    truncation: TruncationConfig | None = None
    """Truncation of older messages (on by default, Think's rule): ``False``/``"off"`` or a
    ``TruncationConfig``. Not applied to a ``messages`` override."""
    failed_turn_messages: Literal["keep", "drop", "fold"] | None = None
    """What the turn sends of earlier user messages that got no reply (their turn failed,
    or was cancelled, before any output was stored): ``"keep"`` (the default) sends them as
    they are, ``"drop"`` leaves them out, ``"fold"`` sends each run of them as one user
    message, their texts after a note that they got no reply. The transcript keeps them
    whatever this says. Not applied to a ``messages`` override."""

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
    """Only these tools are offered in this step, and only these may run for its calls."""
    system: str | None = None
    messages: list[Message] | None = None
    """The full message list this step sends (the transcript is untouched)."""
    experimental_context: Any = None
    """Given to tools as ``ToolContext.experimental_context`` from this step on (later steps
    inherit it until a ``before_step`` sets it again). JSON-serialisable: it is stored."""
    provider_options: dict[str, Any] | None = None
    """Merged over the turn's ``provider_options`` for this step only."""
    cache: CacheConfig | None = None
    """Prompt caching for this step; its set fields win over the turn's ``cache``."""

    @property
    def sets_context(self) -> bool:
        """Whether ``experimental_context`` was given (``None`` included)."""
        return "experimental_context" in self.model_fields_set


class ToolCallDecision(_Config):
    """``before_tool_call``'s return. ``None`` means allow.

    * ``allow()``: run the tool with the model's input;
    * ``allow(input)``: run it with this input instead (validated against the tool's input
      model; invalid input becomes a tool error the model sees);
    * ``block(reason)``: don't run it; the model sees ``reason`` (default
      ``Tool "<name>" was blocked by beforeToolCall.``) as the tool's output;
    * ``substitute(output)``: don't run it; the model sees ``output``.
    """

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


class RepairedToolCall(_Config):
    """``repair_tool_call``'s return: the call to make instead (its id stays the model's).

    ``tool_name`` None keeps the model's name; ``input`` None keeps the model's input. The
    repaired call is validated like any call: one that still fails goes back to the model as
    a tool error (there is no second repair).
    """

    tool_name: str | None = None
    input: Any = None
    """The tool's arguments as a JSON value (an object for every registered tool)."""


ToolCallProblem = Literal["unknown_tool", "invalid_json", "invalid_input"]


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
    """The assembled system prompt (the session's context blocks, or ``system_prompt``)."""
    messages: list[Message]
    """The transcript the model will see (with the ephemeral continue prompt, if any)."""
    tools: list[ToolSpec]
    """The tools offered by default (registered tools with ``default=True``)."""
    model: str
    """The ``provider:model`` id of the turn (request, conversation or worker default)."""
    continuation: bool
    """True for a ``continueLastTurn`` turn."""
    body: dict[str, Any]
    """The request's custom body (for a continuation: its body, else the last request's)."""
    request_id: str
    """The request's id: stable across retries, a good idempotency key."""
    conversation_id: str
    turn_number: int
    is_cancelled: Callable[[], bool] = lambda: False
    """True once the turn has been cancelled (``cancelChat``)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The turn's metadata (Think's ``ChatOptions.metadata``): the request's JSON object, or
    the request it continues. Read-only: changing it changes nothing stored."""


@dataclass
class StepResult:
    """One finished step, as ``on_step_finish`` and ``PrepareStepContext.steps`` see it.

    Like every hook context it says which turn it belongs to (``conversation_id``,
    ``turn_number``, ``request_id``): stable keys for idempotent side effects.
    """

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
    """The files the model generated in this step (``FilePart``s)."""
    sources: list[Any] = field(default_factory=list)
    """The sources (citations) the model streamed in this step (``SourcePart``s)."""
    request: dict[str, Any] = field(default_factory=dict)
    """What was asked of the model: ``model``, ``message_count``, ``system_chars``,
    ``tools`` (names), ``tool_choice``, ``provider_options``, ``headers`` (names only),
    ``attempt`` and the sampling settings that were set."""
    conversation_id: str = ""
    turn_number: int = 0
    request_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The turn's metadata (Think's ``ChatOptions.metadata``): the request's JSON object, or
    the request it continues. Read-only: changing it changes nothing stored."""

    @property
    def reasoning_text(self) -> str | None:
        text = "".join(r.text for r in self.reasoning)
        return text or None


StepContext = StepResult


@dataclass
class PrepareStepContext:
    """``before_step``'s argument."""

    steps: list[StepResult]
    """The steps of this turn that already finished (empty at step 0)."""
    step_number: int
    model: str
    """The ``provider:model`` id the step will use unless overridden."""
    messages: list[Message]
    """What the step will send: the turn's context plus its steps so far."""
    experimental_context: Any = None
    """The context the previous steps set (inherited), or None."""
    request_id: str = ""
    conversation_id: str = ""
    turn_number: int = 0
    body: dict[str, Any] = field(default_factory=dict)
    """The request's custom body (as ``TurnContext.body``)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The turn's metadata (Think's ``ChatOptions.metadata``): the request's JSON object, or
    the request it continues. Read-only: changing it changes nothing stored."""


@dataclass
class ToolCallContext:
    """``before_tool_call``'s argument."""

    tool_call_id: str
    tool_name: str
    input: Any
    """The arguments the model emitted (already validated against the tool's input), or
    the repaired call's (``repaired``)."""
    step_number: int
    messages: list[Message]
    """The conversation as the model saw it when it made this call."""
    type: str = "tool-call"
    dynamic: bool = False
    provider_metadata: dict[str, Any] | None = None
    is_cancelled: Callable[[], bool] = lambda: False
    """True once the turn has been cancelled."""
    request_id: str = ""
    conversation_id: str = ""
    turn_number: int = 0
    body: dict[str, Any] = field(default_factory=dict)
    repaired: bool = False
    """The model's call did not validate and ``repair_tool_call`` fixed it: ``tool_name``
    and ``input`` are the repaired call's."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The turn's metadata (Think's ``ChatOptions.metadata``): the request's JSON object, or
    the request it continues. Read-only: changing it changes nothing stored."""


@dataclass
class ToolCallRepairContext:
    """``repair_tool_call``'s argument: a call of the model that does not validate."""

    tool_call_id: str
    tool_name: str
    """The name the model called (for ``"unknown_tool"``, one it was not offered)."""
    input: Any
    """What the model emitted: its parsed arguments, or the raw text when it was not JSON."""
    problem: ToolCallProblem
    """``"unknown_tool"`` (not offered in this step, or no such tool), ``"invalid_json"``
    (the arguments are not JSON) or ``"invalid_input"`` (they fail the tool's input model)."""
    error: str
    """The validation error, as the model would see it without a repair."""
    tools: list[ToolSpec]
    """The tools this step offered, with their input schemas."""
    step_number: int
    messages: list[Message]
    """What the step sent to the model (before its own output)."""
    system: str = ""
    """The system prompt the step sent."""
    request_id: str = ""
    conversation_id: str = ""
    turn_number: int = 0
    body: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    """The turn's metadata (Think's ``ChatOptions.metadata``): the request's JSON object, or
    the request it continues. Read-only: changing it changes nothing stored."""


@dataclass
class ToolCallResultContext:
    """``after_tool_call``'s argument. ``input`` is what the model emitted."""

    tool_call_id: str
    tool_name: str
    input: Any
    """What the model emitted (not a substituted input; the repaired call's when
    ``repaired``)."""
    step_number: int
    messages: list[Message]
    duration_ms: float
    """Wall-clock time of the call: ``before_tool_call``'s decision and the tool's run."""
    success: bool
    """False when the tool raised, its input was invalid or the hook raised; blocked and
    substituted calls are successes (the model received an output): ``outcome`` tells them
    from a run."""
    output: Any = None
    error: Any = None
    """The error text the model sees (when ``success`` is False)."""
    outcome: ToolCallOutcome = "ran"
    """What became of the call: ``"ran"`` (the tool ran, whatever it returned),
    ``"blocked"``, ``"substituted"`` (``before_tool_call``'s decision), ``"denied"`` (the user
    refused an approval), ``"unavailable"``, ``"invalid"``, ``"interrupted"`` or
    ``"hook_error"`` (``contract.ToolCallOutcome``)."""
    type: str = "tool-call"
    dynamic: bool = False
    request_id: str = ""
    conversation_id: str = ""
    turn_number: int = 0
    body: dict[str, Any] = field(default_factory=dict)
    repaired: bool = False
    """``repair_tool_call`` fixed the model's call: ``tool_name`` and ``input`` are the
    repaired call's (what the transcript records)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The turn's metadata (Think's ``ChatOptions.metadata``): the request's JSON object, or
    the request it continues. Read-only: changing it changes nothing stored."""


@dataclass
class ChunkContext:
    """``on_chunk``'s argument.

    ``chunk.type`` is one of ``text-delta``, ``reasoning-delta``, ``source``, ``tool-call``,
    ``tool-input-start``, ``tool-input-delta``, ``tool-result`` (``preliminary=True`` for
    the intermediate values of a streaming tool) or ``raw``.
    """

    chunk: StreamPart
    step_number: int = 0
    request_id: str = ""
    conversation_id: str = ""
    turn_number: int = 0
    attempt: int = 1
    """The model-step (or tool-call) activity attempt that streamed the chunk: 1 for the
    first. A chunk with a higher attempt than you have seen for ``step_number`` means the
    step is being retried (the live stream's ``reset``): drop what you accumulated from its
    earlier attempts, they are discarded."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The turn's metadata (Think's ``ChatOptions.metadata``): the request's JSON object, or
    the request it continues. Read-only: changing it changes nothing stored."""


@dataclass
class ChatResponseResult:
    """``on_chat_response``'s argument."""

    message: Message
    """The persisted assistant message (no parts when the turn produced none)."""
    request_id: str
    continuation: bool
    status: Literal["completed", "error", "aborted"]
    error: str | None = None
    """The error message the caller saw (when ``status`` is ``"error"``)."""
    conversation_id: str = ""
    turn_number: int = 0
    body: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    """The turn's metadata (Think's ``ChatOptions.metadata``): the request's JSON object, or
    the request it continues. Read-only: changing it changes nothing stored."""


@dataclass
class ChatErrorContext:
    """Where a turn failed, for ``classify_chat_error`` and ``on_chat_error``."""

    stage: ErrorStage
    """``"turn"`` (before streaming: begin_turn, before_turn), ``"stream"`` (the model
    step), ``"persist"`` (finishing the turn), ``"tool"``."""
    request_id: str | None = None
    messages_persisted: bool = False
    """Whether the turn's incoming user messages were stored before it failed."""
    classification: ChatErrorClassification | None = None
    """``"context_overflow"`` when an overflow could not be recovered."""
    conversation_id: str = ""
    turn_number: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    """The turn's metadata (Think's ``ChatOptions.metadata``): the request's JSON object, or
    the request it continues. Read-only: changing it changes nothing stored."""


RecoveryDecision = Literal["continue", "stop"]
"""What ``on_chat_recovery`` returns: go on with the new attempt, or end the turn ``aborted``."""


@dataclass
class ChatRecoveryContext:
    """``on_chat_recovery``'s argument (Think's ``onChatRecovery`` context): an attempt of a
    model step or a tool call is about to run again because the one before was lost."""

    stage: Literal["stream", "tool"]
    """``"stream"``: a model step is asked of the model again; ``"tool"``: a tool call runs
    again (its result was never recorded)."""
    step_number: int
    attempt: int
    """The new attempt (2 or more), worker deaths included."""
    reason: RecoveryReason
    """Why the attempt before it was lost: ``"worker_lost"`` (no heartbeat: killed, out of
    memory, frozen), ``"worker_shutdown"`` (past its shutdown grace), ``"store_unavailable"``,
    ``"stalled"`` (the model stream went silent for the stall timeout)."""
    error: str = ""
    """The lost attempt's failure, as the workflow's history has it."""
    deaths: int = 0
    """The activity's worker deaths so far; past ``TURNS_CRASH_RETRIES`` the turn ends
    ``error`` (``WorkerCrashLoop``) without asking."""
    partial_text: str = ""
    """The text the lost attempt streamed, which this attempt discards (Think's
    ``partialText``; read from the live stream: empty when streaming is off)."""
    partial_parts: list[Part] = field(default_factory=list)
    """The lost attempt's parts (text, reasoning, tool calls), as ``partial_text``."""
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_input: Any = None
    """For ``stage="tool"``: the call that runs again, with the input it runs with."""
    request_id: str = ""
    conversation_id: str = ""
    turn_number: int = 0
    continuation: bool = False
    body: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    """The turn's metadata (Think's ``ChatOptions.metadata``). Read-only."""


@dataclass
class ContextOverflowConfig:
    """Context-overflow recovery: reactive compact-and-retry, and proactive compaction."""

    reactive: bool = False
    max_retries: int = 1
    max_input_tokens: int | None = None
    """Proactive: compact before a step whose context reached ``max_input_tokens * headroom``."""
    headroom: float = 0.9
    max_compactions: int = 1
