"""Turning a raw signal or update payload into a value, cheaply, or into a typed rejection.

Signal and update handlers take ``temporalio.common.RawValue``: the SDK then hands over the
payload as it came, instead of decoding it first and silently dropping whatever fails to
decode (non-JSON, invalid UTF-8, lone surrogates, nesting past the parser's limit, a payload
the codec could not decrypt). Here the size is checked before anything is parsed, so an
oversized request costs nothing, and every failure becomes a :class:`Rejected` with a type
from the contract and a short message that never echoes the request back.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from durable_turns.contract import INVALID_PAYLOAD, REQUEST_TOO_LARGE, UNDECRYPTABLE_ENCODING

JSON_ENCODING = b"json/plain"
"""The one encoding a request may have (what every SDK's JSON converter writes)."""

ABSENT = RawValue(Payload())
"""The default of a raw handler argument: the signal or update came with no argument."""


class Rejected(Exception):
    """A request the conversation will not run: ``type`` is one of the contract's names."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(message)
        self.type = type
        self.message = message


def payload_size(raw: RawValue) -> int:
    return len(raw.payload.data)


def decode(raw: RawValue, limit: int, what: str = "request") -> Any:
    """The JSON value of ``raw`` (None when absent, or ``binary/null``); raises
    :class:`Rejected`: past ``limit``, not ``json/plain``, not JSON."""
    payload = raw.payload
    size = len(payload.data)
    if size > limit:
        raise Rejected(
            REQUEST_TOO_LARGE,
            f"{what} is {size} bytes; the limit is {limit} bytes."
            " Send large content by reference (a URL or a file id).",
        )
    encoding = payload.metadata.get("encoding")
    if encoding is None and not size:
        return None
    if encoding == UNDECRYPTABLE_ENCODING:
        reason = payload.metadata.get("reason", b"").decode("utf-8", errors="replace")
        raise Rejected(INVALID_PAYLOAD, f"{what} could not be decrypted: {reason[:200]}")
    if encoding == b"binary/null":
        return None
    if encoding != JSON_ENCODING:
        # Only JSON is a request: a client's bytes (``binary/plain``), a protobuf message or
        # an encoding nobody knows would reach the handlers as a value they cannot encode
        # again (bytes that are not UTF-8 failed the task that forwarded a tool result).
        shown = (encoding or b"").decode("utf-8", errors="replace")[:40] or "none"
        raise Rejected(INVALID_PAYLOAD, f"{what} is not JSON (its encoding is {shown!r})")
    try:
        value = workflow.payload_converter().from_payload(payload)
    except RecursionError:
        raise Rejected(INVALID_PAYLOAD, f"{what} is nested too deeply") from None
    except Exception as e:  # not JSON, bad UTF-8, lone surrogate, too deep, unknown encoding
        raise Rejected(INVALID_PAYLOAD, f"{what} is not valid JSON: {_problem(e)}") from None
    return value


def _problem(error: Exception) -> str:
    """What is wrong, in words: the parser's own message ("expected value at line 1 column
    2"), not pydantic's wrapping of it ("1 validation error for any …")."""
    if isinstance(error, ValidationError) and error.errors():
        first = error.errors()[0]
        text = str(first.get("msg") or first.get("type") or "")
        text = text.removeprefix("Invalid JSON: ")
    else:
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text[:200] or type(error).__name__
