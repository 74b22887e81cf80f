"""The chat POST flow: what ``POST /api/chat`` starts or continues, and the reply to stream.

A new user message starts a turn (its request id derived from the UI message id, so the
same POST twice is one request); a regenerate names the reply it replaces; the last
assistant message with a client tool's output or an approval in it hands each answer to
the turn that waits on it, and the same reply goes on. Every refusal is a
:class:`BadRequest` (the engine's typed refusals are mapped by :meth:`FrontDoor.call`).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import re
from collections.abc import Awaitable
from typing import Any

from durable_turns.contract import (
    MAX_MESSAGE_ID_BYTES,
    MAX_TOOL_RESULT_BYTES,
    RequestRecord,
    id_problem,
    message_id_problem,
)
from durable_turns.messages import FilePart, Message, Part, TextPart
from durable_turns.streams import TOOL_RESULT, TOOL_WAIT
from durable_turns.web import protocol
from durable_turns.web.door import FrontDoor
from durable_turns.web.replies import Reply, read_chain
from durable_turns.web.requests import BadRequest, ChatRequest, UIMessage, request_metadata

QUEUED_GRACE_S = 0.5
"""A message that waits its turn behind a running reply (another tab's): the door waits this
long for a prompt refusal (a full queue: 429), then answers at once (headers, ``start``,
``data-queued``, keep-alive comments) and streams the reply when its turn starts. The same
when no worker runs the chat (``data-waiting``): the reply streams once one comes."""


async def chat(door: FrontDoor, conv: str, request: ChatRequest) -> Reply:
    """What a POST /api/chat starts or continues: the reply to stream."""
    body = request.body
    model = body.pop("model", None)
    model = model if isinstance(model, str) and model in door.models else None
    metadata = request_metadata(request, body)
    if request.trigger == "regenerate-message":
        return await _regenerate(door, conv, request, body, model, metadata)
    last = request.last
    if last is None:
        raise BadRequest(400, "InvalidRequest", "messages is empty")
    if last.role == "assistant":
        return await _answer_tools(door, conv, last)
    if last.role != "user":
        raise BadRequest(400, "InvalidRequest", "the last message must be a user message")
    message, request_id = engine_message(last)
    record, waiting = await _start(
        door,
        conv,
        request_id,
        door.client.start(
            conv, [message], body=body, model=model, request_id=request_id, metadata=metadata
        ),
    )
    return Reply.of(conv, record, waiting)


async def _start(
    door: FrontDoor, conv: str, request_id: str, start: Awaitable[RequestRecord]
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
    waits_on, busy = await _waits_on(door, conv, request_id)
    if waits_on:
        if inspect.iscoroutine(start):
            start.close()
        raise BadRequest(
            409,
            "TurnWaiting",
            f"the reply waits for the browser's answer ({waits_on}): answer it, or stop"
            " the turn (POST /api/chat/{id}/stop), before sending a new message",
        )
    sent = asyncio.ensure_future(door.call(start))
    await asyncio.wait({sent}, timeout=QUEUED_GRACE_S)
    if sent.done():
        return sent.result(), None  # (a prompt refusal raises here: a 4xx)
    waiting = await door.workers.problem(conv)
    if not busy and waiting is None:
        record: RequestRecord = await sent  # a worker runs it: its answer, as it comes
        return record, None
    door.queued.add(sent)
    sent.add_done_callback(door.queued.discard)
    return sent, waiting


async def _waits_on(door: FrontDoor, conv: str, request_id: str) -> tuple[str, bool]:
    """The tools the running turn waits on the client for (``""``: none), unless that
    turn is the request's own; and whether the request will wait its turn (a turn runs,
    or requests are queued, that are not its own)."""
    try:
        state = await door.client.state(conv)
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
        pending = await door.client.pending_tool_calls(conv)
    except Exception:  # a new conversation, Temporal busy: the update says what it must
        return "", False
    return ", ".join(sorted({str(p.get("tool_name")) for p in pending})), True


async def _regenerate(
    door: FrontDoor,
    conv: str,
    request: ChatRequest,
    body: dict[str, Any],
    model: str | None,
    metadata: dict[str, Any] | None,
) -> Reply:
    target = request.messageId or await _last_reply(door, conv)
    if not target.startswith(f"{conv}/turn-"):
        raise BadRequest(400, "InvalidRequest", "messageId is not a reply of this chat")
    request_id = "ui-regenerate-" + hashlib.sha256(target.encode()).hexdigest()[:24]
    record, waiting = await _start(
        door,
        conv,
        request_id,
        door.client.start_regenerate(
            conv,
            target,
            body=body or None,
            model=model,
            request_id=request_id,
            metadata=metadata,
        ),
    )
    return Reply.of(conv, record, waiting)


async def _last_reply(door: FrontDoor, conv: str) -> str:
    """The id of the chat's last reply: a regenerate names it (``"last"`` would make
    every such request the same request, and the engine answer it once)."""
    replies = protocol.ui_messages(await door.store.messages(conv))
    if not replies or replies[-1]["role"] != "assistant":
        raise BadRequest(400, "NothingToRegenerate", "the chat does not end with a reply")
    return str(replies[-1]["id"])


async def _answer_tools(door: FrontDoor, conv: str, last: UIMessage) -> Reply:
    """The browser answered client tools or approvals in the last assistant message:
    hand what the turn waits on to it, and go on streaming the same reply."""
    head = reply_turn(conv, last.id)
    chain = await read_chain(door, conv, head)
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
        await door.call(door.client.submit_tool_results(conv, [answer]))
    return Reply(conv, head, protocol.assistant_id(conv, head), resume_after=resume_after)


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
