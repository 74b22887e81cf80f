"""The transcript store interface: the source of truth for messages.

Temporal history holds decisions and small summaries; the store holds the transcript, each
turn's recorded config, every step's output and every tool result. Every write is keyed
(message id; turn id + run + step; tool call id) and idempotent, so a retried activity never
duplicates anything: ``add_*``/``save_*`` keep the first write, ``put_*`` replaces it.
"""

from __future__ import annotations

import abc
import functools
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field
from temporalio.exceptions import ApplicationError

from durable_turns.contract import INVALID_REQUEST
from durable_turns.messages import Message, Part, SourcePart, Usage


class TurnRecord(BaseModel):
    turn_id: str
    conversation_id: str
    turn_number: int
    request_id: str
    status: str = "running"
    continuation: bool = False
    body: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    """The TurnConfig that before_turn returned, with the engine's resolved defaults."""
    run: int = 0
    """Re-runs of the turn after a context compaction."""
    error: dict[str, Any] | None = None


class StepRecord(BaseModel):
    step: int
    run: int = 0
    parts: list[Part] = Field(default_factory=list)
    finish_reason: str = "stop"
    raw_finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    provider_metadata: dict[str, Any] | None = None
    response: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    model: str = ""
    active_tools: list[str] | None = None
    """``before_step``'s tool restriction for this step: its calls may use only these."""
    experimental_context: Any = None
    """``before_step``'s context, in force from this step on; tools get it."""
    sources: list[SourcePart] = Field(default_factory=list)
    """The sources (citations) the model streamed in this step."""
    request: dict[str, Any] = Field(default_factory=dict)
    """What was asked of the model (``request_metadata``): model, settings, tool names,
    message count; never the messages themselves, nor header values."""


class ToolResultRecord(BaseModel):
    tool_call_id: str
    tool_name: str
    step: int
    output: Any = None
    is_error: bool = False
    blocked: bool = False
    duration_ms: float = 0.0


_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")
_QUERY_PASSWORD = re.compile(r"((?:^|[?&;\s])password=)[^&;\s]*", re.I)


def mask_url(url: str) -> str:
    """A store or stream URL fit for errors and logs: its password becomes ``***``."""
    return _QUERY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", url))


ID_FIELDS = ("id", "conversation_id", "turn_id", "request_id", "tool_call_id", "message_id")
STORE_METHODS = (
    "add_messages",
    "put_message",
    "messages",
    "save_turn",
    "get_turn",
    "last_turn_number",
    "save_step",
    "steps",
    "save_tool_result",
    "tool_results",
)


def check_ids(value: Any) -> None:
    """Refuse ids with a NUL character (PostgreSQL cannot store one) with a typed,
    non-retryable ``InvalidRequest``, at once, instead of a minute of retries."""
    if isinstance(value, str):
        bad = "\x00" in value
    elif isinstance(value, BaseModel):
        bad = any("\x00" in v for f in ID_FIELDS if isinstance(v := getattr(value, f, None), str))
    elif isinstance(value, list | tuple):
        for item in value:
            check_ids(item)
        return
    else:
        return
    if bad:
        raise ApplicationError(
            "an id contains a NUL character: ids are text without NUL",
            type=INVALID_REQUEST,
            non_retryable=True,
        )


def _checking_ids(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        for value in (*args, *kwargs.values()):
            check_ids(value)
        return await fn(self, *args, **kwargs)

    return checked


class TranscriptStore(abc.ABC):
    """Async, idempotent persistence for conversations. Implementations: SQLite, PostgreSQL.

    Every implementation's reads and writes refuse ids with a NUL character (``check_ids``).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in STORE_METHODS:
            fn = cls.__dict__.get(name)
            if fn is not None and not getattr(fn, "__isabstractmethod__", False):
                setattr(cls, name, _checking_ids(fn))

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and create or migrate the schema."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    # messages
    @abc.abstractmethod
    async def add_messages(
        self, conversation_id: str, messages: list[Message], turn_id: str | None = None
    ) -> None:
        """Append messages; a message whose id is already stored is left as it is."""

    @abc.abstractmethod
    async def put_message(
        self, conversation_id: str, message: Message, turn_id: str | None = None
    ) -> None:
        """Insert or replace one message (keeps its position in the transcript)."""

    @abc.abstractmethod
    async def messages(self, conversation_id: str) -> list[Message]:
        """The transcript, oldest first."""

    # turns
    @abc.abstractmethod
    async def save_turn(self, turn: TurnRecord) -> None:
        """Insert or replace a turn record."""

    @abc.abstractmethod
    async def get_turn(self, turn_id: str) -> TurnRecord | None: ...

    @abc.abstractmethod
    async def last_turn_number(self, conversation_id: str) -> int:
        """The highest turn number stored for the conversation, 0 if none."""

    # steps
    @abc.abstractmethod
    async def save_step(self, turn_id: str, step: StepRecord) -> StepRecord:
        """Store a step's output unless one is stored already; return the stored one."""

    @abc.abstractmethod
    async def steps(self, turn_id: str, run: int) -> list[StepRecord]:
        """The steps of one run of a turn, in order."""

    # tool results
    @abc.abstractmethod
    async def save_tool_result(self, turn_id: str, result: ToolResultRecord) -> ToolResultRecord:
        """Store a tool result unless one is stored for that call id; return the stored one."""

    @abc.abstractmethod
    async def tool_results(self, turn_id: str) -> dict[str, ToolResultRecord]:
        """The tool results of a turn, by tool call id."""

    async def __aenter__(self) -> TranscriptStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
