"""Turning a raw signal or update payload into a value, cheaply, or into a typed rejection.

Signals are not parsed where they arrive: a burst of them is delivered in one workflow
activation, and Temporal fails a task whose activation runs past its 2 s deadlock detector
(then every later request is refused while the task retries). A signal handler only puts
the payload in the :class:`Inbox` (constant work: its size is checked, nothing is read);
the inbox is drained beside the workflow's loop, a bounded amount of parsing per activation
(:data:`INTAKE_BYTES_PER_TASK`), so the worst burst costs many short activations instead of
one that fails.

Signal and update handlers take ``temporalio.common.RawValue``: the SDK then hands over the
payload as it came, instead of decoding it first and silently dropping whatever fails to
decode (non-JSON, invalid UTF-8, lone surrogates, nesting past the parser's limit, a payload
the codec could not decrypt). Here the size is checked before anything is parsed, so an
oversized request costs nothing, and every failure becomes a :class:`Rejected` with a type
from the contract and a short message that never echoes the request back.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from durable_turns.contract import (
        INTAKE_PAUSE,
        INVALID_PAYLOAD,
        QUEUE_FULL,
        REQUEST_TOO_LARGE,
        UNDECRYPTABLE_ENCODING,
    )
    from durable_turns.errors import Rejected

JSON_ENCODING = b"json/plain"
"""The one encoding a request may have (what every SDK's JSON converter writes)."""

ABSENT = RawValue(Payload())
"""The default of a raw handler argument: the signal or update came with no argument."""


FOLD_PREFIX = "durable_turns.folded:"
"""A signal named ``FOLD_PREFIX + name`` carries the payloads of several ``name`` signals, in
order: a client may batch a burst so, and the workflow's dynamic signal handler hands each
payload on as its own signal would have been (each is checked as its own signal)."""


def unfold(name: str) -> str | None:
    """The signal a batched signal's name stands for (None: not a batch)."""
    return name[len(FOLD_PREFIX) :] if name.startswith(FOLD_PREFIX) else None


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


MAX_INBOX_REQUESTS = 10_000
"""Signals waiting to be parsed; past it (or :data:`MAX_INBOX_BYTES`), a signal is rejected
(``QueueFull``) unread. A burst this large is taken in about a hundred workflow tasks."""

MAX_INBOX_BYTES = 16 * 1024 * 1024
"""Encoded bytes of the signals waiting to be parsed (they are in the history already)."""

INTAKE_BYTES_PER_TASK = 256 * 1024
"""How much the inbox parses in one activation before it lets the activation end: one
full-size request, about 15 ms of parsing and validation at the worst (many messages, the last
one bad) on an idle machine, a few times that on a loaded one, far under the deadlock
detector's 2 s."""

INTAKE_MIN_COST = 2 * 1024
"""Each signal counts as at least this many bytes, so an activation parses at most
``INTAKE_BYTES_PER_TASK / INTAKE_MIN_COST`` (128) signals, however small."""

PAUSE_TIMEOUT = timedelta(seconds=10)


class Inbox:
    """Signals received and not yet parsed, in order: ``offer`` is O(1); a task beside the
    workflow's loop hands them to ``take`` at a bounded rate."""

    def __init__(self, take: Callable[[str, RawValue], None]) -> None:
        self._take = take
        self._drain: asyncio.Task[None] | None = None
        self._items: deque[tuple[str, RawValue]] = deque()
        self._bytes = 0
        self.received = 0
        """Signals ever put in (a ticket: an update waits until ``taken`` reaches it)."""
        self.taken = 0
        """Signals ever parsed (or rejected)."""

    @property
    def draining(self) -> bool:
        return self._drain is not None

    def offer(
        self, kind: str, raw: RawValue, limit: int, what: str = "request"
    ) -> asyncio.Task[None] | None:
        """Keep the signal ``kind``'s ``raw`` for later; raises :class:`Rejected` (unread)
        when it is over ``limit`` bytes or the inbox is full. Returns the drain task when this
        signal started one (a workflow that hands over waits for it)."""
        size = len(raw.payload.data)
        if size > limit:
            raise Rejected(
                REQUEST_TOO_LARGE,
                f"{what} is {size} bytes; the limit is {limit} bytes."
                " Send large content by reference (a URL or a file id).",
            )
        if len(self._items) >= MAX_INBOX_REQUESTS or self._bytes + size > MAX_INBOX_BYTES:
            raise Rejected(
                QUEUE_FULL,
                f"{len(self._items)} signals ({self._bytes} bytes) are waiting to be read"
                f" (limits {MAX_INBOX_REQUESTS}, {MAX_INBOX_BYTES} bytes): retry in a moment",
            )
        self._items.append((kind, raw))
        self._bytes += size
        self.received += 1
        if self._drain is not None:
            return None
        self._drain = asyncio.create_task(self._drain_all())
        return self._drain

    async def _drain_all(self) -> None:
        try:
            await self._drain_items()
        finally:
            self._drain = None

    async def _drain_items(self) -> None:
        """Hand every waiting signal to ``take``, in order, :data:`INTAKE_BYTES_PER_TASK` per
        activation; returns when the inbox is empty. Between two rounds, the no-op local
        activity ``intake_pause`` ends the activation (the SDK runs all that is ready in one;
        a local activity's result comes back in the next, within the same workflow task, with
        no round trip to the server; one marker in the history per round)."""
        while self._items:
            budget = INTAKE_BYTES_PER_TASK
            while self._items and budget > 0:
                kind, raw = self._items.popleft()
                size = len(raw.payload.data)
                self._bytes -= size
                budget -= max(size, INTAKE_MIN_COST)
                try:
                    self._take(kind, raw)
                finally:
                    self.taken += 1
            if self._items:
                await workflow.execute_local_activity(
                    INTAKE_PAUSE, start_to_close_timeout=PAUSE_TIMEOUT, summary="intake pause"
                )
