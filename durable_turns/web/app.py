"""The front door's routes: the AI SDK chat endpoints over one Temporal client.

    POST /api/chat                 a new user message (a turn), a client tool's output or an
                                   approval (the same reply goes on), or a regenerate
    GET  /api/chat/{id}/stream     the running reply from its start, then live (204: none)
    GET  /api/chat/{id}/messages   the conversation as UIMessage[]
    POST /api/chat/{id}/stop       cancelChat for the running turn
    GET  /                         the chat page

Nothing here holds a turn's state: a reply is read from the turn's live chunk stream by
offset, a conversation from the transcript store, what runs from the conversation's
``state``. Any replica answers any request, and a reply's stream can be dropped, resumed
and read twice without a duplicated or missing character.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.responses import Response
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_turns.client import TurnsClient
from durable_turns.config import Settings
from durable_turns.contract import (
    MAX_MESSAGE_ID_BYTES,
    MAX_TOOL_RESULT_BYTES,
    ConversationState,
    InvalidId,
    RequestRecord,
    id_problem,
    message_id_problem,
    turn_id,
    turn_workflow_id,
)
from durable_turns.errors import EmptyMessage, NoWorker
from durable_turns.messages import FilePart, Message, Part, TextPart
from durable_turns.presence import describe, running_turns
from durable_turns.store import TranscriptStore, open_store
from durable_turns.streams import (
    TOOL_RESULT,
    TOOL_WAIT,
    TURN_FINISH,
    ChunkStreamBackend,
    StreamEvent,
)
from durable_turns.streams.hub import StreamHub
from durable_turns.web import protocol, watch
from durable_turns.web.auth import (
    Authenticate,
    Unauthorized,
    bearer_tokens,
    chat_problem,
    conversation_id,
    principal_of,
)
from durable_turns.web.requests import (
    MAX_BODY_BYTES,
    BadRequest,
    ChatRequest,
    UIMessage,
    parse_chat_request,
    request_metadata,
)

log = logging.getLogger("durable_turns.web")

KEEPALIVE_S = 15.0
"""An SSE comment after this long without a chunk (proxies close idle connections)."""

WRITE_TIMEOUT_S = 30.0
"""A client that takes no data for this long is disconnected (its stream can resume)."""

LIVENESS_CHECK_S = 20.0
"""With no event for this long, the turn's workflow is looked at: a turn that ended
without its final event (terminated, timed out) ends the response instead of a wait."""

QUEUE_FRAMES = 64
"""Frames buffered per response: past it the reader waits for the client (backpressure)."""

QUEUED_GRACE_S = 0.5
"""A message that waits its turn behind a running reply (another tab's): the door waits this
long for a prompt refusal (a full queue: 429), then answers at once (headers, ``start``,
``data-queued``, keep-alive comments) and streams the reply when its turn starts. The same
when no worker runs the chat (``data-waiting``): the reply streams once one comes."""

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

WAITING = "waiting"
"""A door-made event in a reply's events: no worker runs the turn (``data``: ``message``)."""


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

    # --- requests -----------------------------------------------------------------------

    async def principal(self, headers: Mapping[str, str]) -> str | None:
        """Who asks (401 when the credentials do not say), before anything is read."""
        return await principal_of(self.authenticate, headers)

    @staticmethod
    def conversation(principal: str | None, chat_id: str) -> str:
        problem = chat_problem(principal, chat_id)
        if problem:
            raise BadRequest(400, "InvalidId", problem)
        return conversation_id(principal, chat_id)

    async def chat(self, conv: str, request: ChatRequest) -> Reply:
        """What a POST /api/chat starts or continues: the reply to stream."""
        body = request.body
        model = body.pop("model", None)
        model = model if isinstance(model, str) and model in self.models else None
        metadata = request_metadata(request, body)
        if request.trigger == "regenerate-message":
            return await self._regenerate(conv, request, body, model, metadata)
        last = request.last
        if last is None:
            raise BadRequest(400, "InvalidRequest", "messages is empty")
        if last.role == "assistant":
            return await self._answer_tools(conv, last)
        if last.role != "user":
            raise BadRequest(400, "InvalidRequest", "the last message must be a user message")
        message, request_id = engine_message(last)
        record, waiting = await self._start(
            conv,
            request_id,
            self.client.start(
                conv, [message], body=body, model=model, request_id=request_id, metadata=metadata
            ),
        )
        return Reply.of(conv, record, waiting)

    async def _start(
        self, conv: str, request_id: str, start: Awaitable[RequestRecord]
    ) -> tuple[RequestRecord | asyncio.Future[RequestRecord], str | None]:
        """Start a request's turn (``start``: the update), unless the running reply waits
        for the browser (an approval, a client tool): a new message would then queue behind
        a turn that waits on this very browser, so it is 409 and nothing is queued. Checked
        before the update is sent (one query), so nothing ever has to be taken back.

        The update returns once the request's turn starts: behind a running reply (another
        tab's) that is when that reply ends. Then, after ``QUEUED_GRACE_S`` without an
        answer, the future of the record is returned, for the response to answer at once and
        stream the reply when it starts. Also when nothing queues it but no worker answers
        within that grace (``waiting for a worker: …``, the second of the pair): the reply
        streams once a worker comes."""
        waits_on, busy = await self._waits_on(conv, request_id)
        if waits_on:
            if inspect.iscoroutine(start):
                start.close()
            raise BadRequest(
                409,
                "TurnWaiting",
                f"the reply waits for the browser's answer ({waits_on}): answer it, or stop"
                " the turn (POST /api/chat/{id}/stop), before sending a new message",
            )
        sent = asyncio.ensure_future(self._call(start))
        await asyncio.wait({sent}, timeout=QUEUED_GRACE_S)
        if sent.done():
            return sent.result(), None  # (a prompt refusal raises here: a 4xx)
        waiting = await self.workers.problem(conv)
        if not busy and waiting is None:
            record: RequestRecord = await sent  # a worker runs it: its answer, as it comes
            return record, None
        self.queued.add(sent)
        sent.add_done_callback(self.queued.discard)
        return sent, waiting

    async def _waits_on(self, conv: str, request_id: str) -> tuple[str, bool]:
        """The tools the running turn waits on the client for (``""``: none), unless that
        turn is the request's own; and whether the request will wait its turn (a turn runs,
        or requests are queued, that are not its own)."""
        try:
            state = await self.client.state(conv)
            running = state.running
            if any(r.request_id == request_id for r in (*state.queue,)):
                return "", True  # the same request again, still queued: it waits
            if running is not None and running.request_id == request_id:
                return "", False
            if any(r.request_id == request_id for r in state.recent):
                return "", False  # the same request again: it attaches to its own turn
            busy = running is not None or bool(state.queue)
            if running is None or running.turn_number is None:
                return "", busy
            pending = await self.client.pending_tool_calls(conv)
        except Exception:  # a new conversation, Temporal busy: the update says what it must
            return "", False
        return ", ".join(sorted({str(p.get("tool_name")) for p in pending})), True

    async def _regenerate(
        self,
        conv: str,
        request: ChatRequest,
        body: dict[str, Any],
        model: str | None,
        metadata: dict[str, Any] | None,
    ) -> Reply:
        target = request.messageId or await self._last_reply(conv)
        if not target.startswith(f"{conv}/turn-"):
            raise BadRequest(400, "InvalidRequest", "messageId is not a reply of this chat")
        request_id = "ui-regenerate-" + hashlib.sha256(target.encode()).hexdigest()[:24]
        record, waiting = await self._start(
            conv,
            request_id,
            self.client.start_regenerate(
                conv,
                target,
                body=body or None,
                model=model,
                request_id=request_id,
                metadata=metadata,
            ),
        )
        return Reply.of(conv, record, waiting)

    async def _last_reply(self, conv: str) -> str:
        """The id of the chat's last reply: a regenerate names it (``"last"`` would make
        every such request the same request, and the engine answer it once)."""
        replies = protocol.ui_messages(await self.store.messages(conv))
        if not replies or replies[-1]["role"] != "assistant":
            raise BadRequest(400, "NothingToRegenerate", "the chat does not end with a reply")
        return str(replies[-1]["id"])

    async def _answer_tools(self, conv: str, last: UIMessage) -> Reply:
        """The browser answered client tools or approvals in the last assistant message:
        hand what the turn waits on to it, and go on streaming the same reply."""
        head = reply_turn(conv, last.id)
        chain = await self.read_chain(conv, head)
        waits = {e.data.get("tool_call_id"): (t, e) for t, e in chain if e.type == TOOL_WAIT}
        answered = {e.data.get("tool_call_id") for _, e in chain if e.type == TOOL_RESULT}
        agents = {  # agent calls whose sub-agent waited: their part holds preliminary output
            str(e.data["agent"].get("tool_call_id"))
            for _, e in chain
            if e.type == TOOL_WAIT and isinstance(e.data.get("agent"), dict)
        }
        resolutions: list[dict[str, Any]] = []
        resume_after: tuple[int, int] | None = None
        for part in last.parts:
            extra = part.extra
            call_id = str(extra.get("toolCallId") or "")
            state = str(extra.get("state") or "")
            if not part.type.startswith(("tool-", "dynamic-tool")) or state not in (
                "output-available",
                "output-error",
                "approval-responded",
            ):
                continue
            if call_id not in waits:
                if call_id in answered or call_id in agents:
                    continue  # a server tool's result, or a sub-agent's output so far
                raise BadRequest(
                    400, "UnknownToolCall", f"no turn of this reply waits on tool call {call_id!r}"
                )
            turn, wait = waits[call_id]
            if resume_after is None or (turn, wait.offset) > resume_after:
                resume_after = (turn, wait.offset)
            if call_id in answered:
                continue  # delivered before (the same POST again): attach to the stream
            resolutions.append(resolution(call_id, wait.data, state, extra))
        if resume_after is None:
            raise BadRequest(
                400, "InvalidRequest", "the last assistant message answers no call a turn waits on"
            )
        for answer in resolutions:  # one signal each: each within the engine's limit
            size = len(json.dumps(answer, ensure_ascii=False).encode())
            if size > MAX_TOOL_RESULT_BYTES:
                raise BadRequest(
                    413,
                    "RequestTooLarge",
                    f"the answer to tool call {answer['tool_call_id']!r} is {size} bytes; the"
                    f" limit is {MAX_TOOL_RESULT_BYTES}",
                )
        for answer in resolutions:
            await self._call(self.client.submit_tool_results(conv, [answer]))
        return Reply(conv, head, protocol.assistant_id(conv, head), resume_after=resume_after)

    async def _call(self, call: Awaitable[Any]) -> Any:
        """A Temporal call; its typed refusals as 4xx, an unreachable server as 503."""
        try:
            return await call
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

    # --- reading replies ----------------------------------------------------------------

    async def running_reply(self, conv: str) -> Reply | None:
        """The reply the conversation is producing now (its first turn), or None. Without a
        worker (no ``state``), the running turn is the conversation's pending child
        workflow, as the server describes it; none: 503 ``NoWorker``."""
        try:
            state = await self.state(conv, worker=True)
        except NoWorker as e:
            number = await self._running_turn(conv)
            if number is None:
                raise BadRequest(503, "NoWorker", str(e)) from None
            head = number
        else:
            running = state.running if state else None
            if running is None or running.turn_number is None:
                return None
            head = running.turn_number
            if running.kind == "continue" and head > 1:  # (its own record may not be stored)
                head -= 1
        while head > 1:  # a continuation carries on the reply of the turn before it
            record = await self.store.get_turn(turn_id(conv, head))
            if record is None or not record.continuation:
                break
            head -= 1
        return Reply(conv, head, protocol.assistant_id(conv, head))

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

    async def _running_turn(self, conv: str) -> int | None:
        """The number of the conversation's running turn (its pending child), from the
        server's description of it; None when it runs none (or is not known)."""
        try:
            described = await describe(self.client.client, conv)
        except RPCError:
            return None
        numbers = [int(m.group(1)) for w in running_turns(described) if (m := _TURN.search(w))]
        return max(numbers, default=None)

    async def read_chain(self, conv: str, head: int) -> list[tuple[int, StreamEvent]]:
        """What a reply's turns have streamed so far, without following."""
        out: list[tuple[int, StreamEvent]] = []
        turn: int | None = head
        while turn is not None:
            events = await self.streams.read(turn_id(conv, turn), -1, by_conversation=True)
            out += [(turn, e) for e in protocol.replayable(events)]
            turn = next((_next_turn(e) for e in events if e.type == TURN_FINISH), None)
        return out

    async def events(self, conv: str, head: int) -> AsyncIterator[tuple[int, StreamEvent]]:
        """A reply's events: each turn's stream (what is there already without discarded
        attempts, then live), then the turn its ``turn-finish`` names. Every response of
        this process that follows a turn shares one reader of its stream (``StreamHub``)."""
        turn: int | None = head
        while turn is not None:
            nxt: int | None = None
            async with self.hub.open(turn_id(conv, turn)) as sub:
                cursor = sub.present[-1].offset if sub.present else -1
                for ev in protocol.replayable(sub.present):
                    yield turn, ev
                    if ev.type == TURN_FINISH:
                        nxt = _next_turn(ev)
                        break
                else:
                    heard = looked = alive_at = time.monotonic()
                    shown: str | None = None  # why it waits, as the client was told
                    while True:
                        finished = False
                        async for ev in sub.live(idle_timeout=watch.WORKER_CHECK_S):
                            cursor, heard, shown = ev.offset, time.monotonic(), None
                            yield turn, ev
                            if ev.type == TURN_FINISH:
                                nxt, finished = _next_turn(ev), True
                        if finished:
                            break
                        # quiet: do workers poll (cached)? now and then, the turn's own tasks
                        now = time.monotonic()
                        deep = now - max(heard, looked) >= watch.TASK_CHECK_S
                        looked = now if deep else looked
                        waiting = await self._waiting(conv, turn, deep)
                        if waiting and waiting != shown:
                            shown = waiting
                            yield (
                                turn,
                                StreamEvent(offset=cursor, type=WAITING, data={"message": waiting}),
                            )
                        if now - max(heard, alive_at) < LIVENESS_CHECK_S:
                            continue
                        alive_at = now
                        if not await self._turn_alive(conv, turn):
                            yield (
                                turn,
                                StreamEvent(
                                    offset=cursor + 1,
                                    type=TURN_FINISH,
                                    data={
                                        "status": "error",
                                        "error": {
                                            "message": "the turn ended without finishing its reply"
                                        },
                                    },
                                ),
                            )
                            break
            turn = nxt

    async def _waiting(self, conv: str, turn: int, deep: bool) -> str | None:
        """``waiting for a worker: …`` when no worker polls the task queue (the door's cached
        answer); ``deep``: or when the turn's task waits unstarted (one or two describes)."""
        if deep:
            return await self.workers.problem(conv, turn)
        known = await self.workers.workers()
        return known.problem() if known is not None else None

    async def _turn_alive(self, conv: str, turn: int) -> bool:
        try:
            handle = self.client.client.get_workflow_handle(turn_workflow_id(conv, turn))
            described = await handle.describe()
        except RPCError as e:
            return e.status != RPCStatusCode.NOT_FOUND
        return described.status == WorkflowExecutionStatus.RUNNING

    async def frames(self, reply: Reply, reset_step: bool) -> AsyncIterator[bytes]:
        """The reply as SSE frames: ``start``, the chunks, ``[DONE]``. A request that waits
        its turn first gets ``start`` (no ``messageId`` yet) and a transient
        ``data-queued``; keep-alive comments follow while it waits (``EventStream``), then
        ``start`` with the reply's id and the reply."""
        if reply.pending is not None:
            yield protocol.frame({"type": "start"})
            if reply.waiting:
                yield protocol.frame(watch.waiting_chunk(reply.waiting))
            else:
                yield protocol.frame(
                    {
                        "type": "data-queued",
                        "transient": True,
                        "data": {"reason": "another reply of this chat is running"},
                    }
                )
            # shielded: a closed response leaves the request queued, as it is in the engine
            pending = asyncio.shield(reply.pending)
            shown = reply.waiting
            while not (await asyncio.wait({pending}, timeout=watch.WORKER_CHECK_S))[0]:
                waiting = await self.workers.problem(reply.conversation_id)
                if waiting and waiting != shown:
                    yield protocol.frame(watch.waiting_chunk(waiting))
                shown = waiting or shown
            reply = Reply.of(reply.conversation_id, pending.result())
        ui = protocol.UIMessageStream(reply.message_id, reset_step=reset_step)
        yield protocol.frame(ui.start())
        if reply.ended is not None:
            if reply.ended == "aborted":
                yield protocol.frame({"type": "abort"})
            yield protocol.frame({"type": "finish", "finishReason": "other"})
            yield protocol.DONE
            return
        muted = reply.resume_after is not None
        current: int | None = None
        # what is answered already (a replay must not stop at those calls' waits)
        chain = await self.read_chain(reply.conversation_id, reply.head)
        ui.answered_later = {
            str(e.data.get("tool_call_id")) for _, e in chain if e.type == TOOL_RESULT
        }
        async for turn, ev in self.events(reply.conversation_id, reply.head):
            if ev.type == WAITING:  # the door's own: no worker runs the turn now
                yield protocol.frame(watch.waiting_chunk(ev.data.get("message")))
                continue
            if turn != current:
                ui.begin_turn(turn)
                current = turn
            chunks = ui.feed(ev)
            if muted:
                if (turn, ev.offset) >= reply.resume_after:  # type: ignore[operator]
                    muted = False
                continue
            for chunk in chunks:
                yield protocol.frame(chunk)
            if ui.needs_resume:
                yield protocol.frame(
                    {
                        "type": "error",
                        "errorText": "a model step was retried: resume the stream to see the reply",
                    }
                )
                yield protocol.DONE
                return
            if ui.done:
                break
            if ev.type == TOOL_WAIT and ui.step_is_waiting():
                for chunk in ui.end_waiting():
                    yield protocol.frame(chunk)
                break
        yield protocol.DONE


@dataclass
class Reply:
    """One reply a response streams: its conversation, first turn and UI message id."""

    conversation_id: str
    head: int
    message_id: str
    resume_after: tuple[int, int] | None = None
    """Continue after this (turn, offset): what the browser already has is not sent again."""
    ended: str | None = None
    """The request ended without a turn (cancelled while queued)."""
    pending: asyncio.Future[RequestRecord] | None = None
    """The request waits its turn: its record once the turn starts (``head`` and
    ``message_id`` are not known before)."""
    waiting: str | None = None
    """It waits for a worker (``waiting for a worker: …``), not behind another reply."""

    @classmethod
    def of(
        cls,
        conv: str,
        record: RequestRecord | asyncio.Future[RequestRecord],
        waiting: str | None = None,
    ) -> Reply:
        """The reply a request's record names (or will, once its turn starts)."""
        if isinstance(record, asyncio.Future):
            return cls(conv, 0, "", pending=record, waiting=waiting)
        if record.turn_number is None:  # cancelled before it ran
            return cls(conv, 0, protocol.assistant_id(conv, 0), ended=record.status)
        return cls(conv, record.turn_number, protocol.assistant_id(conv, record.turn_number))


def _next_turn(ev: StreamEvent) -> int | None:
    value = ev.data.get("continued_by_turn")
    return value if isinstance(value, int) else None


_TURN = re.compile(r"/turn-([0-9]+)(?:~[^/]*)?\Z")
"""A turn's workflow id's end (``<conversation>/turn-<n>``, maybe ``~<suffix>``)."""

_REPLY_ID = re.compile(r"/turn-([0-9]+)/assistant\Z")


def reply_turn(conv: str, message_id: str) -> int:
    """The first turn of a reply, from its UI message id."""
    match = _REPLY_ID.search(message_id)
    if not match or message_id[: match.start()] != conv:
        raise BadRequest(
            400, "InvalidRequest", "the last assistant message is not a reply of this chat"
        )
    return int(match.group(1))


def engine_message(ui: UIMessage) -> tuple[Message, str]:
    """A browser's user message as the engine's, and the request id that makes its POST
    idempotent (derived from the UI message id)."""
    parts: list[Part] = []
    for part in ui.parts:
        extra = part.extra
        if part.type == "text" and isinstance(extra.get("text"), str):
            if extra["text"]:
                parts.append(TextPart(text=extra["text"]))
        elif part.type == "file" and isinstance(extra.get("url"), str):
            parts.append(_file(extra))
    if not parts:
        raise BadRequest(400, "InvalidRequest", "the user message has no text or file part")
    ui_id = ui.id
    usable = message_id_problem(ui_id) is None and len(ui_id.encode()) <= MAX_MESSAGE_ID_BYTES
    request_id = f"ui-{ui_id}" if usable and id_problem(f"ui-{ui_id}", "request id") is None else ""
    if not request_id:
        request_id = "ui-" + hashlib.sha256(ui_id.encode()).hexdigest()[:32]
    message = Message(
        id=ui_id if usable else "", role="user", parts=parts, metadata={"ui_message_id": ui_id}
    )
    return message, request_id


def _file(extra: dict[str, Any]) -> FilePart:
    url: str = extra["url"]
    media_type = str(extra.get("mediaType") or "application/octet-stream")
    if url.startswith("data:") and ";base64," in url:
        head, _, data = url.partition(";base64,")
        return FilePart(media_type=head.removeprefix("data:") or media_type, data=data)
    return FilePart(media_type=media_type, url=url)


def resolution(
    call_id: str, wait: dict[str, Any], state: str, extra: dict[str, Any]
) -> dict[str, Any]:
    """A browser's answer to one waiting call, as ``submitToolResult`` takes it."""
    if wait.get("waiting_for") == "approval":
        approval = extra.get("approval") or {}
        if state != "approval-responded" or not isinstance(approval, dict):
            raise BadRequest(400, "InvalidRequest", f"tool call {call_id!r} waits for an approval")
        reason = approval.get("reason")
        return {
            "tool_call_id": call_id,
            "approved": bool(approval.get("approved")),
            "reason": reason if isinstance(reason, str) else None,
        }
    if state == "output-error":
        return {
            "tool_call_id": call_id,
            "output": str(extra.get("errorText") or ""),
            "is_error": True,
        }
    if state != "output-available":
        raise BadRequest(400, "InvalidRequest", f"tool call {call_id!r} waits for its output")
    return {"tool_call_id": call_id, "output": extra.get("output")}


# --- the ASGI app -------------------------------------------------------------------------


def create_app(
    settings: Settings | None = None,
    *,
    authenticate: Authenticate | None = None,
    client: TurnsClient | None = None,
) -> Any:
    """The front door as an ASGI app (FastAPI). ``authenticate`` (headers → principal)
    overrides ``TURNS_HTTP_TOKEN``; with neither, every request is let in and chat ids are
    conversation ids. ``client`` reuses a connected ``TurnsClient``."""
    settings = settings or Settings.from_env()
    if authenticate is None and settings.http_token:
        authenticate = bearer_tokens(settings.http_token)
    door: dict[str, FrontDoor] = {}
    opening = asyncio.Lock()

    async def opened() -> FrontDoor:
        """The door, connected on first use: by the app's lifespan, or by its first request
        where nothing runs the lifespan (Starlette runs none for a mounted app)."""
        if "it" not in door:
            async with opening:
                if "it" not in door:
                    turns = client or await TurnsClient.connect(settings)
                    streams = await turns._stream_backend()
                    store = open_store(settings.resolved_store_url)
                    await store.open()
                    door["it"] = FrontDoor(
                        authenticate=authenticate,
                        client=turns,
                        streams=streams,
                        hub=StreamHub(streams, by_conversation=True),
                        store=store,
                        max_streams=settings.http_max_streams,
                        max_streams_per_principal=settings.http_max_streams_per_principal,
                        models=frozenset(settings.http_models),
                    )
        return door["it"]

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await opened()
        try:
            yield
        finally:
            it = door.pop("it", None)
            if it is not None:
                await it.store.close()
                if client is None:
                    await it.client.aclose()

    allowed = allowed_origins(settings.http_origins)
    public: set[Any] = set()  # endpoints a safe request may reach from anywhere

    async def guard(request: Request) -> None:
        """Every route's first step (:func:`guard_request`), so no route can miss it."""
        safe = request.method in SAFE_METHODS
        guard_request(
            request, authenticate is None, allowed, safe and request.scope.get("endpoint") in public
        )

    app = FastAPI(
        title="durable-turns",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        dependencies=[Depends(guard)],
    )

    @app.exception_handler(BadRequest)
    async def _bad(request: Request, exc: BadRequest) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(Unauthorized)
    async def _unauthorized(request: Request, exc: Unauthorized) -> Response:
        return JSONResponse(
            {"error": {"type": "Unauthorized", "message": str(exc)}},
            status_code=401,
            headers={"www-authenticate": "Bearer"},
        )

    @app.post("/api/chat")
    async def post_chat(request: Request) -> Any:
        it = await opened()
        principal = await it.principal(request.headers)
        raw = await read_body(request, MAX_BODY_BYTES)
        chat = parse_chat_request(raw)
        conv = it.conversation(principal, chat.id)
        it.reserve(principal)
        try:
            reply = await it.chat(conv, chat)
        except BaseException:
            it.release(principal)
            raise
        frames = it.frames(reply, reset_step=wants_v7(request.headers, settings.http_protocol))
        return EventStream(it, frames, principal)

    @app.get("/api/chat/{chat_id:path}/stream")
    async def get_stream(chat_id: str, request: Request) -> Any:
        it = await opened()
        principal = await it.principal(request.headers)
        conv = it.conversation(principal, chat_id)
        reply = await it.running_reply(conv)
        if reply is None:
            return Response(status_code=204)
        it.reserve(principal)
        frames = it.frames(reply, reset_step=wants_v7(request.headers, settings.http_protocol))
        return EventStream(it, frames, principal)

    @app.get("/api/chat/{chat_id:path}/messages")
    async def get_messages(chat_id: str, request: Request) -> Any:
        it = await opened()
        conv = it.conversation(await it.principal(request.headers), chat_id)
        messages = protocol.ui_messages(await it.store.messages(conv))
        return Response(protocol.dumps(messages), media_type="application/json")

    @app.post("/api/chat/{chat_id:path}/stop")
    async def stop(chat_id: str, request: Request) -> Any:
        it = await opened()
        conv = it.conversation(await it.principal(request.headers), chat_id)
        try:
            state = await it.state(conv, worker=True)
        except NoWorker as e:  # the signal waits for a worker, as what it cancels does
            await it._call(it.client.cancel(conv, None))
            return JSONResponse({"stopped": True, "request_id": None, "waiting": str(e)})
        running = state.running if state else None
        if running is None:
            return JSONResponse({"stopped": False, "reason": "no turn is running"})
        await it._call(it.client.cancel(conv, running.request_id))
        return JSONResponse(
            {"stopped": True, "request_id": running.request_id, "turn_number": running.turn_number}
        )

    @app.get("/")
    async def page() -> Any:
        html = resources.files("durable_turns.web").joinpath("static/index.html").read_text()
        return HTMLResponse(html, headers={"cache-control": "no-cache"})

    @app.get("/api/health")
    async def health() -> Any:
        """200 when Temporal answers and workers poll the task queue, else 503; either way
        the JSON says which (``docs/web.md``)."""
        it = await opened()
        ok, body = await it.workers.health()
        body = {
            "ok": ok,
            **body,
            "open_streams": it.open_streams,
            "streams_followed": it.hub.followed,
            "closing": it.closing.is_set(),
        }
        return JSONResponse(body, status_code=200 if ok and not it.closing.is_set() else 503)

    async def drain() -> None:
        """Shutdown's first step: every open response ends now with ``data-resume``."""
        if "it" in door:
            door["it"].closing.set()

    app.state.drain = drain

    public.update({page, health})

    return app


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


def guard_request(request: Any, open_door: bool, allowed: frozenset[str], public: bool) -> None:
    """What every request passes before its route runs (a refusal starts and stops nothing,
    and needs no connection to Temporal).

    Without authentication (``open_door``: a loopback door) nothing but the request says who
    sent it, so a web page the user visits must not be able to drive the door: the ``Host``
    must be a loopback name (no DNS rebinding, 403), and neither ``Origin`` nor
    ``Sec-Fetch-Site`` may say a page of another origin sent it (403,
    :func:`cross_site_problem`). ``public``: a GET of the page itself, which a link from
    anywhere may open. With authentication the credentials decide.

    And always: a request that may change state (any method but GET, HEAD, OPTIONS) must
    declare its body ``application/json``, parsed exactly (415, :func:`media_type`). A page
    on another site cannot send that without a CORS preflight, which is never granted;
    ``text/plain; x=application/json`` is ``text/plain``."""
    if open_door and not public:
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if name not in LOOPBACK_HOSTS:
            raise BadRequest(
                403,
                "Forbidden",
                f"without authentication this server answers only loopback names, not"
                f" {host[:100]!r} (set TURNS_HTTP_TOKEN to serve other hosts)",
            )
        problem = cross_site_problem(request.headers, request.url.scheme, allowed)
        if problem:
            raise BadRequest(403, "Forbidden", problem)
    if request.method not in SAFE_METHODS:
        given = request.headers.get("content-type", "")
        if media_type(given) != JSON_MEDIA_TYPE:
            raise BadRequest(
                415,
                "UnsupportedMediaType",
                f"send the request as {JSON_MEDIA_TYPE} (content-type: {given[:100]!r})",
            )


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing; every other one is held to :func:`guard_request`'s rules."""

JSON_MEDIA_TYPE = "application/json"

DEFAULT_PORTS = {"http": 80, "https": 443}


def media_type(content_type: str) -> str:
    """The media type of a ``Content-Type`` value: what comes before its first ``;``,
    trimmed and lower-cased (RFC 9110 §8.3.1). ``text/plain; x=application/json`` is
    ``text/plain``: a parameter never makes a body JSON."""
    return content_type.partition(";")[0].strip().lower()


def allowed_origins(origins: list[str]) -> frozenset[str]:
    """``TURNS_HTTP_ORIGINS``, normalised; an entry that is no origin is a ``ValueError``."""
    allowed = set()
    for origin in origins:
        normal = normal_origin(origin)
        if normal is None:
            raise ValueError(
                f"TURNS_HTTP_ORIGINS: {origin!r} is not an origin (scheme://host[:port])"
            )
        allowed.add(normal)
    return frozenset(allowed)


def normal_origin(origin: str) -> str | None:
    """``scheme://host:port`` (lower-cased, the default port written out) of an ``Origin``
    value or an allowed origin; None when it is not one (``null``, a path, no host)."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or parts.username or parts.password:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or DEFAULT_PORTS[scheme]}"


def cross_site_problem(
    headers: Mapping[str, str], scheme: str, allowed: frozenset[str]
) -> str | None:
    """Why a request without authentication looks sent by a page of another site, or None.

    Refused: an ``Origin`` that is not the door's own (``scheme://Host``) nor in ``allowed``
    (normalised by :func:`normal_origin`; ``null`` included), and a ``Sec-Fetch-Site`` other
    than ``same-origin`` or ``none`` (the address bar, a bookmark) unless the ``Origin`` is
    an allowed one: ``same-site`` is refused too, since another port of this host (another
    local server's page) is the same site. A request with neither header (curl, a script,
    the ``ai`` client in Node) is not a page's, and passes."""
    origin = headers.get("origin")
    if origin is not None:
        given = normal_origin(origin)
        if given is not None and given in allowed:
            return None
        own = normal_origin(f"{scheme}://{headers.get('host', '')}")
        if given is None or given != own:
            return (
                f"a request from the page of another origin ({origin[:100]!r}) is refused"
                " without authentication (set TURNS_HTTP_TOKEN, or list the origin in"
                " TURNS_HTTP_ORIGINS)"
            )
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in ("same-origin", "none"):
        return (
            f"a request from a page of another site (Sec-Fetch-Site: {site[:40]!r}) is refused"
            " without authentication (set TURNS_HTTP_TOKEN)"
        )
    return None


def wants_v7(headers: Mapping[str, str], default: int) -> bool:
    """Whether the client takes ai 7's chunks (``reset-step``, ``tool-approval-response``):
    the request's ``x-ui-message-stream-version`` header, else ``TURNS_HTTP_PROTOCOL``. On
    ai 6 a retried step ends the live reply with an error that asks for a resume, which
    replays without the discarded attempt."""
    given = headers.get("x-ui-message-stream-version", "").strip()
    return (int(given) if given.isdigit() else default) >= 7


async def read_body(request: Any, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BadRequest(
            413, "RequestTooLarge", f"the body is {declared} bytes; the limit is {limit}"
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, "RequestTooLarge", f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class EventStream(Response):
    """An SSE response with backpressure: frames come from a bounded queue filled by the
    reader of the turn's stream, which waits when the client reads slowly; a client that
    takes nothing for ``WRITE_TIMEOUT_S`` is disconnected; a closed connection stops the
    reader (it is not a Stop: the turn goes on, and the stream can be resumed)."""

    def __init__(
        self, door: FrontDoor, frames: AsyncIterator[bytes], principal: str | None = None
    ) -> None:
        super().__init__(status_code=200, headers=protocol.HEADERS)
        self.door = door
        self.frames = frames
        self.principal = principal

    async def __call__(
        self,
        scope: Any,
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_FRAMES)

        async def produce() -> None:
            try:
                async for data in self.frames:
                    await queue.put(data)
            except BadRequest as e:
                await queue.put(protocol.frame({"type": "error", "errorText": e.message}))
                await queue.put(protocol.DONE)
            except Exception as e:  # never a silent hang: the client sees it
                log.exception("a reply's stream failed")
                await queue.put(protocol.frame({"type": "error", "errorText": type(e).__name__}))
                await queue.put(protocol.DONE)
            # (cancelled: nobody reads the queue any more, so nothing more is put in it)
            await queue.put(None)

        async def disconnected() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return

        producer = asyncio.create_task(produce())
        watcher = asyncio.create_task(disconnected())
        closing = asyncio.create_task(self.door.closing.wait())
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(k.encode(), v.encode()) for k, v in protocol.HEADERS.items()],
                }
            )
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait(
                    {getter, watcher, closing},
                    timeout=KEEPALIVE_S,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if watcher in done:
                    getter.cancel()
                    return
                if closing in done and getter not in done:
                    # the door shuts down: the client resumes the reply elsewhere (no [DONE])
                    getter.cancel()
                    await asyncio.wait_for(
                        send(
                            {
                                "type": "http.response.body",
                                "body": protocol.frame(watch.resume_chunk()),
                                "more_body": True,
                            }
                        ),
                        WRITE_TIMEOUT_S,
                    )
                    break
                if getter not in done:
                    getter.cancel()
                    data: bytes | None = protocol.KEEPALIVE
                else:
                    data = getter.result()
                if data is None:
                    break
                # what else is ready goes out in the same write (one send, one syscall)
                batch = [data]
                while not queue.empty() and len(batch) < QUEUE_FRAMES:
                    more = queue.get_nowait()
                    if more is None:
                        queue.put_nowait(None)  # the end, after this write
                        break
                    batch.append(more)
                await asyncio.wait_for(
                    send(
                        {
                            "type": "http.response.body",
                            "body": b"".join(batch) if len(batch) > 1 else data,
                            "more_body": True,
                        }
                    ),
                    WRITE_TIMEOUT_S,
                )
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (TimeoutError, OSError):
            pass  # a slow or gone client: its reply can be resumed
        finally:
            self.door.release(self.principal)
            for task in (producer, watcher, closing):
                task.cancel()
            for task in (producer, watcher, closing):
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(task, 5)
            with contextlib.suppress(BaseException):  # lets the stream's hub entry go
                await asyncio.wait_for(self.frames.aclose(), 5)  # type: ignore[attr-defined]
