"""The public wire contract: names, defaults and the I/O types of workflows and activities.

Clients (any language), workflows and activities all import this one module. Every type
is a JSON object with snake_case fields and defaults, so it can grow without breaking
running workflows. Workflow, signal, query, update and activity names below are persisted
compatibility data: running workflows replay against them, so never rename them casually.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from temporalio.common import SearchAttributeKey

from durable_turns.messages import Message, Usage

# --- names ---------------------------------------------------------------------------------

DEFAULT_TASK_QUEUE = "durable-turns"
CONVERSATION_WORKFLOW = "ConversationWorkflow"
TURN_WORKFLOW = "TurnWorkflow"

SIGNAL_SUBMIT = "submitMessages"
SIGNAL_CONTINUE = "continueLastTurn"
SIGNAL_CANCEL = "cancelChat"
SIGNAL_TOOL_RESULT = "submitToolResult"
"""On the conversation: a client tool's result or an approval, for the running turn."""
TURN_SIGNAL_TOOL_RESULT = "toolResult"
"""The same, sent to a turn directly."""
UPDATE_SEND = "sendMessage"
QUERY_STATE = "state"

# Activity names: the workflows schedule them by these strings and the activities register
# under them, so both sides import them from here.
OPEN_CONVERSATION = "open_conversation"
BEGIN_TURN = "begin_turn"
MODEL_STEP = "model_step"
TOOL_CALL = "tool_call"
COMPACT = "compact"
FINISH_TURN = "finish_turn"
FAIL_TURN = "fail_turn"
CHAT_RESPONSE = "chat_response"

DEFAULT_MAX_STEPS = 10
DEFAULT_MODEL = "demo:weather"
"""The model when none is configured anywhere: an offline scripted stand-in, not an LLM."""

MAX_REQUEST_BYTES = 256 * 1024
"""A client request larger than this is rejected: it would bloat history toward 2 MB."""

# Error types that cross the activity boundary (``ApplicationError.type``); the workflow's
# retry policies name them, so they are persisted compatibility data too.
PROVIDER_TRANSIENT = "ProviderTransientError"
PROVIDER_ERROR = "ProviderError"
STREAM_STALLED = "StreamStalled"
HOOK_ERROR = "HookError"
INVALID_REQUEST = "InvalidRequest"
INVALID_MODEL = "InvalidModel"
TOOL_TIMEOUT = "ToolTimeout"
TOOL_ERROR = "ToolError"
"""A tool that timed out or raised, retried as a new attempt (only with ``@tool(retries=…)``)."""

CONTINUE_PROMPT = (
    "Continue your previous response from exactly where it left off. Do not repeat any of it."
)

# Search attributes, registered by the embedded server (see durable_turns.devserver).
CONVERSATION_ID = SearchAttributeKey.for_keyword("ConversationId")
TURN_STATUS = SearchAttributeKey.for_keyword("TurnStatus")
TURN_MODEL = SearchAttributeKey.for_keyword("TurnModel")
SEARCH_ATTRIBUTES = (CONVERSATION_ID, TURN_STATUS, TURN_MODEL)


def validation_problems(error: ValidationError, limit: int | None = None) -> str:
    """A pydantic error as one line a client (or a model) can act on: ``field: problem; …``."""
    return "; ".join(
        f"{'.'.join(str(x) for x in e['loc']) or 'input'}: {e['msg']}"
        for e in error.errors()[:limit]
    )


def turn_workflow_id(conversation_id: str, turn_number: int) -> str:
    """A turn's workflow id: ``<conversation id>/turn-<n>``, readable and unique."""
    return f"{conversation_id}/turn-{turn_number}"


def turn_id(conversation_id: str, turn_number: int) -> str:
    """The key of a turn in the transcript store (the same string as its workflow id)."""
    return turn_workflow_id(conversation_id, turn_number)


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- what clients send ---------------------------------------------------------------------


class SubmitMessages(_Wire):
    """``submitMessages`` signal / ``sendMessage`` update: new messages that start a turn."""

    messages: list[Message] = Field(min_length=1)
    request_id: str | None = None
    """Chosen by the client for idempotency and cancellation; generated when absent."""
    body: dict[str, Any] = Field(default_factory=dict)
    """Custom fields for the hooks (``TurnContext.body``)."""
    model: str | None = None
    """A ``provider:model`` id for this turn."""

    @field_validator("messages")
    @classmethod
    def _not_empty(cls, messages: list[Message]) -> list[Message]:
        for i, message in enumerate(messages):
            if not message.parts:
                raise ValueError(f"message {i} has no content")
        return messages


class ContinueLastTurn(_Wire):
    """``continueLastTurn`` signal: continue the last assistant message."""

    body: dict[str, Any] | None = None
    request_id: str | None = None


class CancelChat(_Wire):
    """``cancelChat`` signal: cancel one request (queued or running), or the running turn."""

    request_id: str | None = None


class ToolResolution(_Wire):
    """``submitToolResult``: what the client decided for a call the turn is waiting on.

    For a client tool: ``output`` (and ``is_error``). For a tool that needs approval:
    ``approved`` (and an optional ``reason`` shown to the model on a denial).
    """

    tool_call_id: str
    output: Any = None
    is_error: bool = False
    approved: bool | None = None
    reason: str | None = None


class ConversationSettings(_Wire):
    """Optional input of ``ConversationWorkflow``; everything has a default."""

    model: str | None = None
    max_steps: int | None = None


# --- turn I/O ------------------------------------------------------------------------------

TurnStatus = Literal["completed", "error", "aborted", "skipped"]
RequestStatus = Literal["queued", "running", "completed", "error", "aborted", "skipped", "rejected"]


class ErrorInfo(_Wire):
    type: str
    message: str
    stage: str | None = None
    classification: str | None = None


class TurnInput(_Wire):
    """Input of ``TurnWorkflow``. Carries the new messages only, never the transcript."""

    conversation_id: str
    turn_number: int = 1
    request_id: str = ""
    new_messages: list[Message] = Field(default_factory=list)
    continuation: bool = False
    body: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    max_steps: int | None = None


class TurnResult(_Wire):
    request_id: str
    conversation_id: str
    turn_number: int
    workflow_id: str
    status: TurnStatus
    text: str = ""
    message_id: str | None = None
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    continuation: bool = False
    error: ErrorInfo | None = None
    auto_continue: bool = False
    """Client tool results or approvals arrived: the conversation continues the turn."""
    output: Any = None
    """The final answer parsed as JSON, when ``TurnConfig.output`` asked for structured output."""
    respond: bool = True
    """False when the worker's hooks do not override ``on_chat_response``: no activity runs."""


class RequestRecord(_Wire):
    """What ``state`` shows of one request."""

    request_id: str
    kind: Literal["submit", "continue"] = "submit"
    status: RequestStatus = "queued"
    turn_number: int | None = None
    error: ErrorInfo | None = None


class ConversationState(_Wire):
    """The ``state`` query's answer."""

    conversation_id: str
    turn_count: int = 0
    running: RequestRecord | None = None
    queue: list[RequestRecord] = Field(default_factory=list)
    recent: list[RequestRecord] = Field(default_factory=list)
    last_result: TurnResult | None = None


# --- activity I/O --------------------------------------------------------------------------


class TurnRef(_Wire):
    """Identifies a turn; every activity input starts from it."""

    conversation_id: str
    turn_number: int
    request_id: str

    @property
    def turn_id(self) -> str:
        return turn_id(self.conversation_id, self.turn_number)


class StopCondition(_Wire):
    """A declarative stop condition (functions cannot cross a workflow boundary)."""

    kind: Literal["has_tool_call", "step_count_is"]
    tool_name: str | None = None
    count: int | None = None


class BeginTurnInput(_Wire):
    turn: TurnRef
    new_messages: list[Message] = Field(default_factory=list)
    continuation: bool = False
    body: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    max_steps: int | None = None
    attempt: int = 0
    """Re-runs of the turn after a compaction count up from 0."""


class TurnPlan(_Wire):
    """What ``begin_turn`` decided (the full TurnConfig stays in the store)."""

    model: str
    max_steps: int
    stop_when: list[StopCondition] = Field(default_factory=list)
    stall_timeout_ms: int = 0
    max_retries: int = 2
    step_timeout_s: float = 600.0
    tool_timeout_s: float = 300.0
    heartbeat_timeout_s: float = 30.0
    skip: bool = False
    """True when there is nothing to do (a continuation with no assistant message to continue)."""
    client_tool_timeout_s: float = 3600.0
    """How long a turn waits for client tool results and approvals."""
    overflow_retries: int = 0
    """Reactive compact-and-retry: how often a context overflow re-runs the turn (0: off)."""
    compact_at_tokens: int | None = None
    """Proactive: compact before the next step once a step's input tokens reach this."""
    max_compactions: int = 1


class ModelStepInput(_Wire):
    turn: TurnRef
    step: int
    model: str
    attempt: int = 0


class ToolCallRef(_Wire):
    tool_call_id: str
    tool_name: str


class StepSummary(_Wire):
    """What the workflow learns of a model step: small, whatever the context size."""

    step: int
    outcome: Literal["ok", "context_overflow"] = "ok"
    finish_reason: str = "stop"
    tool_calls: list[ToolCallRef] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    text_chars: int = 0
    error: str | None = None


class ToolCallInput(_Wire):
    turn: TurnRef
    step: int
    tool_call_id: str
    tool_name: str
    resolution: ToolResolution | None = None


class ToolOutcome(_Wire):
    tool_call_id: str
    tool_name: str
    success: bool
    blocked: bool = False
    error: str | None = None
    pending: Literal["client", "approval"] | None = None
    """The call waits for the client: its result, or an approval."""


class FinishTurnInput(_Wire):
    turn: TurnRef
    steps: int
    status: TurnStatus = "completed"
    continuation: bool = False
    usage: Usage = Field(default_factory=Usage)
    error: ErrorInfo | None = None


class FailTurnInput(_Wire):
    turn: TurnRef
    steps: int
    error: ErrorInfo
    continuation: bool = False


class CompactInput(_Wire):
    turn: TurnRef
    model: str
    reason: Literal["overflow", "proactive"] = "overflow"
    number: int = 0
    """Compactions of this turn so far (keys the stored summary)."""


class CompactResult(_Wire):
    shortened: bool
    tokens_before: int
    tokens_after: int
    folded: int = 0
    reason: str = ""


class ChatResponseInput(_Wire):
    result: TurnResult
