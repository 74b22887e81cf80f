"""Reading a reply: which one a chat is producing, and its turns' chunk streams as SSE frames.

A reply is read from its turns' live chunk streams by offset (what is there already, without
discarded attempts, then live through the process's :class:`StreamHub`), following each
``turn-finish`` to the turn that continues it. While nothing comes, the door says why: a
request queued behind another reply (``data-queued``), no worker to run it
(``data-waiting``), a turn that ended without its final event (the response ends). The
keep-alive comments and the backpressure are the SSE response's (``sse``).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from durable_turns.contract import RequestRecord, turn_id, turn_workflow_id
from durable_turns.errors import NoWorker
from durable_turns.presence import describe, running_turns
from durable_turns.streams import TOOL_RESULT, TOOL_WAIT, TURN_FINISH, StreamEvent
from durable_turns.web import protocol, watch
from durable_turns.web.door import FrontDoor
from durable_turns.web.requests import BadRequest

LIVENESS_CHECK_S = 20.0
"""With no event for this long, the turn's workflow is looked at: a turn that ended
without its final event (terminated, timed out) ends the response instead of a wait."""

WAITING = "waiting"
"""A door-made event in a reply's events: no worker runs the turn (``data``: ``message``)."""


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


async def running_reply(door: FrontDoor, conv: str) -> Reply | None:
    """The reply the conversation is producing now (its first turn), or None. Without a
    worker (no ``state``), the running turn is the conversation's pending child
    workflow, as the server describes it; none: 503 ``NoWorker``."""
    try:
        state = await door.state(conv, worker=True)
    except NoWorker as e:
        number = await _running_turn(door, conv)
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
        record = await door.store.get_turn(turn_id(conv, head))
        if record is None or not record.continuation:
            break
        head -= 1
    return Reply(conv, head, protocol.assistant_id(conv, head))


async def _running_turn(door: FrontDoor, conv: str) -> int | None:
    """The number of the conversation's running turn (its pending child), from the
    server's description of it; None when it runs none (or is not known)."""
    try:
        described = await describe(door.client.client, conv)
    except RPCError:
        return None
    numbers = [int(m.group(1)) for w in running_turns(described) if (m := _TURN.search(w))]
    return max(numbers, default=None)


async def read_chain(door: FrontDoor, conv: str, head: int) -> list[tuple[int, StreamEvent]]:
    """What a reply's turns have streamed so far, without following."""
    out: list[tuple[int, StreamEvent]] = []
    turn: int | None = head
    while turn is not None:
        events = await door.streams.read(turn_id(conv, turn), -1, by_conversation=True)
        out += [(turn, e) for e in protocol.replayable(events)]
        turn = next((_next_turn(e) for e in events if e.type == TURN_FINISH), None)
    return out


async def events(door: FrontDoor, conv: str, head: int) -> AsyncIterator[tuple[int, StreamEvent]]:
    """A reply's events: each turn's stream (what is there already without discarded
    attempts, then live), then the turn its ``turn-finish`` names. Every response of
    this process that follows a turn shares one reader of its stream (``StreamHub``)."""
    turn: int | None = head
    while turn is not None:
        nxt: int | None = None
        async with door.hub.open(turn_id(conv, turn)) as sub:
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
                    waiting = await _waiting(door, conv, turn, deep)
                    if waiting and waiting != shown:
                        shown = waiting
                        yield (
                            turn,
                            StreamEvent(offset=cursor, type=WAITING, data={"message": waiting}),
                        )
                    if now - max(heard, alive_at) < LIVENESS_CHECK_S:
                        continue
                    alive_at = now
                    if not await _turn_alive(door, conv, turn):
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


async def _waiting(door: FrontDoor, conv: str, turn: int, deep: bool) -> str | None:
    """``waiting for a worker: …`` when no worker polls the task queue (the door's cached
    answer); ``deep``: or when the turn's task waits unstarted (one or two describes)."""
    if deep:
        return await door.workers.problem(conv, turn)
    known = await door.workers.workers()
    return known.problem() if known is not None else None


async def _turn_alive(door: FrontDoor, conv: str, turn: int) -> bool:
    try:
        handle = door.client.client.get_workflow_handle(turn_workflow_id(conv, turn))
        described = await handle.describe()
    except RPCError as e:
        return e.status != RPCStatusCode.NOT_FOUND
    return described.status == WorkflowExecutionStatus.RUNNING


async def frames(door: FrontDoor, reply: Reply, reset_step: bool) -> AsyncIterator[bytes]:
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
            waiting = await door.workers.problem(reply.conversation_id)
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
    chain = await read_chain(door, reply.conversation_id, reply.head)
    ui.answered_later = {str(e.data.get("tool_call_id")) for _, e in chain if e.type == TOOL_RESULT}
    async for turn, ev in events(door, reply.conversation_id, reply.head):
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


def wants_v7(headers: Mapping[str, str], default: int) -> bool:
    """Whether the client takes ai 7's chunks (``reset-step``, ``tool-approval-response``):
    the request's ``x-ui-message-stream-version`` header, else ``TURNS_HTTP_PROTOCOL``. On
    ai 6 a retried step ends the live reply with an error that asks for a resume, which
    replays without the discarded attempt."""
    given = headers.get("x-ui-message-stream-version", "").strip()
    return (int(given) if given.isdigit() else default) >= 7
