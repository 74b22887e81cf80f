"""What a browser may send the front door, with every bound explicit (``docs/web.md``).

``DefaultChatTransport`` POSTs ``{...body, id, messages, trigger, messageId}``: the chat id,
the whole ``UIMessage[]`` list, and the transport's extra ``body`` fields, which the hooks
see as ``TurnContext.body``. The server trusts none of the history it is sent (the store
holds the conversation); it reads the last message only: a new user message, or the last
assistant message with a client tool's output or an approval in it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import from_json, to_json

from durable_turns.contract import metadata_problem, validation_problems
from durable_turns.errors import BadRequest

MAX_BODY_BYTES = 4 * 1024 * 1024
"""A request body over this many bytes is refused (413) before it is parsed. The transport
sends the whole chat every time: a very long chat should send only its last message
(``prepareSendMessagesRequest``), which is all the server reads."""

MAX_MESSAGES = 2000
"""Messages in one request; past it, 400."""

MAX_PARTS = 500
"""Parts in one message."""

MAX_PART_BYTES = 256 * 1024
"""One part's JSON (a text, a tool output); past it, 413. A new user message must also fit
the engine's own request limit (256 KiB for the whole request)."""

PART_TYPES = frozenset(
    {"text", "reasoning", "file", "step-start", "source-url", "source-document", "dynamic-tool"}
)
"""Part types of the protocol; ``tool-<name>`` and ``data-<name>`` too. Anything else: 400."""


class UIPart(BaseModel):
    """One part of a ``UIMessage``; fields beyond ``type`` are kept as they came."""

    model_config = ConfigDict(extra="allow")

    type: str

    @field_validator("type")
    @classmethod
    def _known(cls, value: str) -> str:
        if value in PART_TYPES or (value.startswith(("tool-", "data-")) and len(value) > 5):
            return value
        raise ValueError(f"unknown part type {value[:80]!r}")

    @property
    def extra(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


class UIMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1, max_length=512)
    role: Literal["system", "user", "assistant"]
    parts: list[UIPart] = Field(default_factory=list, max_length=MAX_PARTS)
    metadata: Any = None


class ChatRequest(BaseModel):
    """``POST /api/chat``: the transport's body. Unknown top-level fields are the ``body``.

    Only the last message is read, so only it is validated (into :class:`UIMessage`); the
    others stay the JSON they came as: a long chat costs one message's parsing."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    messages: list[Any] = Field(default_factory=list, max_length=MAX_MESSAGES)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = None  # the protocol's name

    last: UIMessage | None = None
    """The last message, validated (set by :func:`parse_chat_request`)."""

    @property
    def body(self) -> dict[str, Any]:
        """The transport's extra fields: ``TurnContext.body`` for the hooks."""
        return dict(self.__pydantic_extra__ or {})


def parse_chat_request(raw: bytes) -> ChatRequest:
    """The request, or a ``BadRequest`` that says what is wrong; nothing is sent anywhere."""
    if len(raw) > MAX_BODY_BYTES:
        raise BadRequest(
            413, "RequestTooLarge", f"the body is {len(raw)} bytes; the limit is {MAX_BODY_BYTES}"
        )
    value = parse_json(raw)
    if isinstance(value, dict):
        value.pop("last", None)  # not the client's to set
    try:
        request = ChatRequest.model_validate(value)
        if request.messages:  # the one the server reads
            request.last = UIMessage.model_validate(request.messages[-1])
    except ValidationError as e:
        raise BadRequest(
            400, "InvalidRequest", f"malformed chat request: {validation_problems(e, 5)}"
        ) from None
    for part in request.last.parts if request.last else []:
        size = len(to_json(part))  # no lone surrogate can be in it (parse_json)
        if size > MAX_PART_BYTES:
            raise BadRequest(
                413,
                "RequestTooLarge",
                f"a {part.type} part is {size} bytes; the limit is {MAX_PART_BYTES}",
            )
    return request


def parse_json(raw: bytes) -> Any:
    """JSON from a request body: UTF-8, no lone surrogate (``"\\ud800"``), numbers of at most
    4,300 digits, nested at most 200 deep: the rules of the engine's own JSON parser (the
    same one, pydantic's), so what the front door accepts it can also send on to Temporal
    (Python's ``json`` module lets each of them through, and the request then failed with a
    500 where it is sent)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(400, "InvalidPayload", "the body is not UTF-8") from None
    try:
        return from_json(text)
    except ValueError as e:
        problem = str(e)
        if "recursion limit" in problem:
            raise BadRequest(400, "InvalidPayload", "the JSON nests too deeply") from None
        raise BadRequest(400, "InvalidPayload", f"the body is not JSON: {problem[:200]}") from None


def request_metadata(request: ChatRequest, body: dict[str, Any]) -> dict[str, Any] | None:
    """The turn's ``metadata``: the transport's ``body.metadata`` (taken out of ``body``), else
    the last message's own ``metadata`` (``sendMessage({text, metadata})``) when it is a user
    message's; None when neither is given (a regeneration then keeps the last request's).
    Not a bounded JSON object (``MAX_METADATA_BYTES``): 400."""
    metadata = body.pop("metadata", None)
    last = request.last
    if metadata is None and last is not None and last.role == "user":
        metadata = last.metadata
    if metadata is None:
        return None
    problem = metadata_problem(metadata)
    if problem:
        raise BadRequest(400, "InvalidRequest", problem)
    return dict(metadata)
