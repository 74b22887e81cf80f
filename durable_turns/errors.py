"""Every exception the engine raises, under one base: :class:`DurableTurnsError`.

``except DurableTurnsError`` catches anything durable-turns itself raised (and nothing a
tool, a hook or a library raised). Where a built-in base helps callers, the exception has it
too: the bad-input errors are also ``ValueError`` (``except ValueError`` keeps working), a
server that cannot start is also ``RuntimeError``.

Each exception is still importable where it was first defined (``durable_turns.contract``,
``durable_turns.store.base``, ``durable_turns.models.base``, …); the classes are the same
objects. A class's name is part of the wire: an exception that fails an activity reaches the
workflow history as an ``ApplicationError`` whose ``type`` is the class name, so a name here
never changes.

This module imports nothing at load beyond the standard library: the workflow sandbox and
every other module of the package can import it without pulling anything in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal


class DurableTurnsError(Exception):
    """The base of every exception durable-turns raises."""


# --- bad input: refused before anything is sent or run -------------------------------------


class InvalidId(DurableTurnsError, ValueError):
    """A client-chosen id breaks the id rules; raised by clients and the CLI before sending."""


class EmptyMessage(DurableTurnsError, ValueError):
    """A turn's message is empty or only whitespace (``contract.empty_message_problem``);
    raised by clients before sending."""


class InvalidMetadata(DurableTurnsError, ValueError):
    """A request's ``metadata`` is not a bounded JSON object; raised by clients before sending."""


class UnknownTransform(DurableTurnsError, ValueError):
    """A turn named a transform this worker does not have."""


class NothingToRegenerate(DurableTurnsError, ValueError):
    """The request names no reply this conversation can regenerate."""


class Rejected(DurableTurnsError):
    """A request the conversation will not run: ``type`` is one of the contract's names."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(message)
        self.type = type
        self.message = message


# --- the turn: model steps, tools, recovery -------------------------------------------------

ErrorKind = Literal["transient", "context_overflow", "auth", "invalid_request", "fatal"]

MAX_PROVIDER_MESSAGE_CHARS = 4000
"""A provider error's message is cut to this (it becomes the activity's failure in the
history, and the turn's ``ErrorInfo.message``, itself cut to 1,000 characters)."""


class ProviderError(DurableTurnsError):
    """A provider call failed. ``kind`` says what the engine should do with it.

    * transient: 408/409/429/5xx, overloaded, connection errors; retried after ``retry_after``
    * context_overflow: the prompt is too long; goes to ``classify_chat_error``
    * auth / invalid_request / fatal: not retried; reaches ``on_chat_error``

    The message is redacted as it is made: configured API keys (verbatim, base64, any case)
    never reach an error, a log line or the workflow history.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind = "fatal",
        status: int | None = None,
        retry_after: float | None = None,
        provider: str = "",
    ) -> None:
        # imported here, not at load, so that this module stays free of the package's own
        # modules (durable_turns.models imports this one)
        from durable_turns.redaction import redact

        # the final text: keys never reach errors or logs; a gateway's whole error page never
        # reaches the history (redacted first, so a cut never leaves a key's fragment behind)
        text = redact(message)
        if len(text) > MAX_PROVIDER_MESSAGE_CHARS:
            text = text[: MAX_PROVIDER_MESSAGE_CHARS - 1] + "…"
        super().__init__(text)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after
        self.provider = provider

    @property
    def retryable(self) -> bool:
        return self.kind == "transient"


class StreamStalled(DurableTurnsError):
    """No chunk arrived for the stall timeout (the first chunk included)."""

    def __init__(self, timeout_ms: int, chunks: int) -> None:
        where = "before the first chunk" if chunks == 0 else f"after {chunks} chunks"
        super().__init__(
            f"Chat stream stalled: no activity for {timeout_ms}ms ({where});"
            " the model request was aborted by the stall watchdog."
        )
        self.timeout_ms = timeout_ms
        self.chunks = chunks


class ToolFailed(DurableTurnsError):
    """Raised by a tool to return an error result the model sees (``is_error``), as it is:
    no traceback in the log, no retry (an MCP server's ``isError`` result is one)."""

    def __init__(self, output: Any) -> None:
        super().__init__(str(output))
        self.output = output


class Stopped(DurableTurnsError):
    """``on_chat_recovery`` returned ``"stop"`` in an activity of the turn: it ends
    ``aborted`` with what it has (raised by the step loop, caught by the turn)."""


# --- backends: the transcript store, live streams, MCP servers ------------------------------


class StoreUnavailable(DurableTurnsError):
    """The store cannot be reached now (connection refused or lost, the database locked past
    its busy timeout, the server restarting): the same call may succeed later."""


class TurnNotOwned(DurableTurnsError):
    """A write into a turn that another workflow run owns (``TurnRecord.owner``)."""

    def __init__(self, turn_id: str, owner: str | None) -> None:
        super().__init__(f"turn {turn_id} is run by another workflow run ({owner or 'none'})")
        self.turn_id = turn_id


class StreamNotOwned(DurableTurnsError):
    """An append by a run that does not own the stream (another run claimed the turn)."""

    def __init__(self, stream_id: str, owner: str | None) -> None:
        super().__init__(
            f"the live stream of {stream_id} belongs to another workflow run ({owner or 'none'})"
        )
        self.stream_id = stream_id
        self.owner = owner


class StreamUnavailable(DurableTurnsError):
    """The chunk stream could not be written within the publisher's ``write_timeout_s``.

    The publisher gives up on the stream from then on: its buffered events are dropped
    (counted in ``dropped``) and its boundaries raise this again at once."""

    def __init__(self, stream_id: str, timeout_s: float, cause: BaseException | None) -> None:
        super().__init__(
            f"chunk stream {stream_id}: not writable within {timeout_s:g}s"
            + (f" (last error: {cause!r})" if cause is not None else "")
        )
        self.stream_id = stream_id
        self.timeout_s = timeout_s


class McpServerUnavailable(DurableTurnsError):
    """The server could not be reached, or dropped during the call."""


class McpError(DurableTurnsError):
    """The server answered the call with a JSON-RPC error."""


class McpProtocolError(DurableTurnsError):
    """The server broke the protocol during the call: a line on stdout that is no JSON-RPC
    message, an answer to a request never sent, or a result that is not a tool result."""


# --- payload encryption ----------------------------------------------------------------------


class CodecError(DurableTurnsError):
    """Base of the codec's errors."""


class KeyConfigError(CodecError, ValueError):
    """``TURNS_ENCRYPTION_KEYS`` (or a key given in code) is missing or malformed."""


class UnknownKeyError(CodecError):
    """A payload was encrypted with a key id this process does not know."""

    def __init__(self, key_id: str, known: Sequence[str]) -> None:
        self.key_id = key_id
        self.known = tuple(known)
        super().__init__(
            f"payload encrypted with key id {key_id!r}, which is not configured here"
            f" (known: {', '.join(self.known) or 'none'}); add it to TURNS_ENCRYPTION_KEYS"
        )


class DecryptionError(CodecError):
    """A payload marked encrypted is malformed or fails authentication (tampered, wrong key)."""


# --- entry points: the embedded server, the demo, the front door ----------------------------


class ServerStartError(DurableTurnsError, RuntimeError):
    """The embedded server cannot start (a port in use, the binary failed): said in one
    line by the ``turns`` commands, never as a traceback."""


class NoWorker(DurableTurnsError):
    """Nothing runs the conversation now: no worker polls its task queue, or a task of it
    waits unstarted (``TurnsClient.state`` says so at once instead of waiting for its query,
    which only a worker answers). Its message starts with ``waiting for a worker``; the
    request itself stays, and runs as soon as a worker comes."""

    waiting_for = "worker"


class DemoError(DurableTurnsError):
    """What stops the demo, said in one line (exit status 1)."""


class BadRequest(DurableTurnsError):
    """A request the front door refuses: ``status`` (4xx), a typed ``code`` and a reason."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.code, "message": self.message}}


class Unauthorized(DurableTurnsError):
    """The front door's ``authenticate`` refused the request's credentials (401)."""
