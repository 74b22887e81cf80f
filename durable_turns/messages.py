"""Provider-neutral messages and stream parts.

A message is a role and a list of typed parts, in the spirit of the AI SDK's UI messages.
Each provider adapter translates these to and from its own API, so one conversation can
switch models mid-way. One assistant message holds a whole turn: its steps are separated
by ``step-start`` parts, and each tool call's result sits beside the call.

Stream parts (``StreamPart``) are what a model step emits while it streams; ``on_chunk``
sees them, and the chunk stream carries them to clients.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

JSONValue = Any
"""Any JSON-serialisable value."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPart(_Model):
    type: Literal["text"] = "text"
    text: str


class ReasoningPart(_Model):
    """Model reasoning. ``signature``/``redacted_data`` are carried back as providers require."""

    type: Literal["reasoning"] = "reasoning"
    text: str = ""
    signature: str | None = None
    redacted_data: str | None = None
    provider_metadata: dict[str, Any] | None = None


class ToolCallPart(_Model):
    type: Literal["tool-call"] = "tool-call"
    tool_call_id: str
    tool_name: str
    input: JSONValue = Field(default_factory=dict)
    provider_metadata: dict[str, Any] | None = None


class ToolResultPart(_Model):
    type: Literal["tool-result"] = "tool-result"
    tool_call_id: str
    tool_name: str
    output: JSONValue = None
    is_error: bool = False


class FilePart(_Model):
    type: Literal["file"] = "file"
    media_type: str
    data: str | None = None
    """Base64 content, or None when ``url`` is set."""
    url: str | None = None


class StepStartPart(_Model):
    type: Literal["step-start"] = "step-start"


Part = Annotated[
    TextPart | ReasoningPart | ToolCallPart | ToolResultPart | FilePart | StepStartPart,
    Field(discriminator="type"),
]

Role = Literal["system", "user", "assistant"]


class Message(_Model):
    """One transcript message.

    Clients may send ``{"role": "user", "content": "text"}``; it is read as one text part
    (``content`` may also be a list of parts), and is never stored or sent on as such.
    """

    id: str = ""
    role: Role
    parts: list[Part] = Field(default_factory=list, fail_fast=True)
    metadata: dict[str, Any] = Field(default_factory=dict)
    content: str | Annotated[list[Part], Field(fail_fast=True)] | None = Field(
        default=None, exclude=True, repr=False
    )
    """Input shorthand for ``parts``; always ``None`` once the message is built."""
    # fail_fast: a list stops at its first invalid item, so rejecting a request of 20,000
    # bad parts costs what rejecting one does (pydantic would otherwise build 20,000 errors).

    # An after-validator, not a before-validator: a stored message (read on every model
    # step) then goes from JSON to the model in pydantic's core alone, about twice as fast.
    @model_validator(mode="after")
    def _content_shorthand(self) -> Message:
        if self.content is not None:
            if "parts" in self.model_fields_set:
                raise ValueError("give either 'content' or 'parts', not both")
            content, self.content = self.content, None
            self.parts = [TextPart(text=content)] if isinstance(content, str) else content
        return self

    @property
    def text(self) -> str:
        """The concatenated text parts."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))


def user_message(text: str, id: str = "") -> Message:
    return Message(id=id, role="user", parts=[TextPart(text=text)])


def copied(messages: list[Message]) -> list[Message]:
    """Independent copies of ``messages`` (through their JSON, cheaper than a deep copy).

    Messages read from the transcript store are shared within a worker process (the store
    does not parse a body it has parsed before): user code that is handed them (a hook, a
    session's summariser or token counter) gets copies, so changing one in place changes
    nothing else."""
    return [Message.model_validate_json(m.model_dump_json()) for m in messages]


# --- usage -------------------------------------------------------------------------------


class Usage(BaseModel):
    """Token counts. A tolerant reader (unknown counts ignored), unlike the message models: it
    travels in the engine's own activity results, which another worker version may read."""

    model_config = ConfigDict(extra="ignore")

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields})


FinishReason = Literal["stop", "tool-calls", "length", "content-filter", "error", "other"]


# --- stream parts ------------------------------------------------------------------------


class TextDelta(_Model):
    type: Literal["text-delta"] = "text-delta"
    text: str


class ReasoningDelta(_Model):
    type: Literal["reasoning-delta"] = "reasoning-delta"
    text: str = ""
    signature: str | None = None
    redacted_data: str | None = None
    provider_metadata: dict[str, Any] | None = None
    """Merged into the reasoning part's (per provider), e.g. OpenAI's reasoning item id."""


class ReasoningEnd(_Model):
    """Closes one reasoning block, so consecutive blocks stay apart."""

    type: Literal["reasoning-end"] = "reasoning-end"


class SourcePart(_Model):
    type: Literal["source"] = "source"
    id: str = ""
    url: str | None = None
    title: str | None = None


class ToolInputStart(_Model):
    type: Literal["tool-input-start"] = "tool-input-start"
    tool_call_id: str
    tool_name: str


class ToolInputDelta(_Model):
    type: Literal["tool-input-delta"] = "tool-input-delta"
    tool_call_id: str
    delta: str


class ToolCallChunk(_Model):
    """A complete tool call: the input is parsed JSON (or the raw text when it is not JSON)."""

    type: Literal["tool-call"] = "tool-call"
    tool_call_id: str
    tool_name: str
    input: JSONValue = Field(default_factory=dict)
    input_error: str | None = None
    provider_metadata: dict[str, Any] | None = None


class ToolResultChunk(_Model):
    type: Literal["tool-result"] = "tool-result"
    tool_call_id: str
    tool_name: str
    output: JSONValue = None
    is_error: bool = False
    preliminary: bool = False


class RawChunk(_Model):
    type: Literal["raw"] = "raw"
    value: JSONValue = None


class FinishChunk(_Model):
    """The end of one model step's stream (not forwarded to ``on_chunk``)."""

    type: Literal["finish"] = "finish"
    finish_reason: FinishReason = "stop"
    raw_finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    provider_metadata: dict[str, Any] | None = None
    response: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)


StreamPart = Annotated[
    TextDelta
    | ReasoningDelta
    | ReasoningEnd
    | SourcePart
    | ToolInputStart
    | ToolInputDelta
    | ToolCallChunk
    | ToolResultChunk
    | RawChunk
    | FinishChunk,
    Field(discriminator="type"),
]


class ToolSpec(BaseModel):
    """What the model sees of a tool. A spec with no executor on the worker is a client tool."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


ToolChoice = Literal["auto", "none", "required"] | dict[str, str]
"""``"auto" | "none" | "required"`` or ``{"type": "tool", "tool_name": NAME}``."""
