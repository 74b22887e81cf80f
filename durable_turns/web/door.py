"""The front door's shared part: what every route holds (one Temporal client, the chunk
stream and its hub, the transcript store, the open-stream bounds) and how a Temporal call's
refusal becomes an HTTP answer (:class:`BadRequest`).

The routes (``app``), the chat POST flow (``chat``), the reading of replies (``replies``)
and the SSE response (``sse``) all take a :class:`FrontDoor`; it knows none of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_turns.client import TurnsClient
from durable_turns.contract import ConversationState, InvalidId, RequestRecord
from durable_turns.errors import EmptyMessage, NoWorker
from durable_turns.store import TranscriptStore
from durable_turns.streams import ChunkStreamBackend
from durable_turns.streams.hub import StreamHub
from durable_turns.web import watch
from durable_turns.web.auth import (
    Authenticate,
    chat_problem,
    conversation_id,
    principal_of,
)
from durable_turns.web.requests import BadRequest

ERROR_STATUS = {
    "QueueFull": 429,
    "RequestTooLarge": 413,
    "InvalidRequest": 400,
    "InvalidId": 400,
    "InvalidPayload": 400,
    "InvalidModel": 400,
    "MessageIdConflict": 400,
    "NothingToRegenerate": 400,
}
"""The HTTP status of an engine's typed refusal (an update's ``ApplicationError`` type);
any other type: 400."""


@dataclass
class FrontDoor:
    """What the routes share: one Temporal client, the chunk stream, the store, limits."""

    authenticate: Authenticate | None
    client: TurnsClient
    streams: ChunkStreamBackend
    hub: StreamHub
    store: TranscriptStore
    max_streams: int
    models: frozenset[str]
    max_streams_per_principal: int = 256
    open_streams: int = 0
    by_principal: dict[str, int] = field(default_factory=dict)
    queued: set[asyncio.Future[RequestRecord]] = field(default_factory=set)
    """Requests sent that wait their turn: held here until their turn starts, whether or
    not their response is still open (the request stays queued either way)."""
    watcher: watch.WorkerWatch | None = None
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at shutdown: every open response ends at once with ``data-resume``."""

    def __post_init__(self) -> None:
        if self.watcher is None:
            self.watcher = watch.WorkerWatch(self.client)

    @property
    def workers(self) -> watch.WorkerWatch:
        """Whether workers run the chats (``data-waiting``, ``/api/health``)."""
        assert self.watcher is not None
        return self.watcher

    def reserve(self, principal: str | None) -> None:
        """Count an open stream; past the process's bound, or one principal's share of it,
        503 (the client retries later)."""
        if self.open_streams >= self.max_streams:
            raise BadRequest(
                503,
                "TooManyStreams",
                f"this server has {self.open_streams} streams open; retry later",
            )
        mine = self.by_principal.get(principal or "", 0)
        if principal is not None and mine >= self.max_streams_per_principal:
            raise BadRequest(
                503,
                "TooManyStreams",
                f"you have {mine} streams open on this server (the limit is"
                f" {self.max_streams_per_principal}); close some, or retry later",
            )
        self.open_streams += 1
        self.by_principal[principal or ""] = mine + 1

    def release(self, principal: str | None) -> None:
        self.open_streams -= 1
        key = principal or ""
        left = self.by_principal.get(key, 1) - 1
        if left > 0:
            self.by_principal[key] = left
        else:
            self.by_principal.pop(key, None)

    async def principal(self, headers: Mapping[str, str]) -> str | None:
        """Who asks (401 when the credentials do not say), before anything is read."""
        return await principal_of(self.authenticate, headers)

    @staticmethod
    def conversation(principal: str | None, chat_id: str) -> str:
        problem = chat_problem(principal, chat_id)
        if problem:
            raise BadRequest(400, "InvalidId", problem)
        return conversation_id(principal, chat_id)

    async def state(self, conv: str, worker: bool = False) -> ConversationState | None:
        """The conversation's state (None: no such conversation). Without a worker to answer
        it, 503 ``NoWorker``, or ``NoWorker`` itself when ``worker``."""
        try:
            return await self.client.state(conv)
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return None
            raise BadRequest(503, "TemporalUnavailable", e.message) from None
        except NoWorker as e:
            if worker:
                raise
            raise BadRequest(503, "NoWorker", str(e)) from None

    async def call(self, awaitable: Awaitable[Any]) -> Any:
        """A Temporal call; its typed refusals as 4xx, an unreachable server as 503."""
        try:
            return await awaitable
        except InvalidId as e:
            raise BadRequest(400, "InvalidId", str(e)) from None
        except EmptyMessage as e:
            raise BadRequest(400, "EmptyMessage", str(e)) from None
        except NoWorker as e:
            raise BadRequest(503, "NoWorker", str(e)) from None
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            raise BadRequest(
                503, "TemporalUnavailable", "the request was not answered in time (no worker?)"
            ) from None
        except WorkflowUpdateFailedError as e:
            cause = e.cause
            if isinstance(cause, ApplicationError) and cause.type:
                raise BadRequest(
                    ERROR_STATUS.get(cause.type, 400), cause.type, cause.message
                ) from None
            raise BadRequest(502, "TurnFailed", str(cause or e)) from None
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                raise BadRequest(404, "NotFound", "no such conversation") from None
            if e.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
                raise BadRequest(503, "TemporalUnavailable", e.message) from None
            raise BadRequest(502, "TemporalError", e.message) from None
