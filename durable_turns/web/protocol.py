"""The AI SDK "UI message stream" protocol, both ways, for the browser front door.

A turn's live chunk stream (``durable_turns.streams``) becomes the protocol's chunks, one
``data: <JSON>`` frame each, so an unmodified ``useChat`` / ``DefaultChatTransport`` assembles
the reply; and a stored conversation becomes the ``UIMessage[]`` a page starts from. The two
are kept in step: the message a client assembles from the stream equals the stored reply as
:func:`ui_messages` renders it, also when a step was retried (a retried step's discarded
attempt is dropped with ``reset-step``, or left out of a replay).

One UI message is one *reply*: a turn, plus the continuation turns that carry it on after
client tool results or approvals (the AI SDK continues the last assistant message). Its id is
the persisted assistant message id of the reply's first turn (``<conversation>/turn-<n>/assistant``).

Why it is long (about 630 lines): the protocol both ways, a live stream to chunks and stored
messages to ``UIMessage``s, kept side by side because the two must agree part for part.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic_core import PydanticSerializationError, to_json

from durable_turns.messages import (
    FilePart,
    Message,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from durable_turns.streams import (
    AGENT_CHUNK,
    CHUNK,
    RECOVERING,
    RESET,
    STEP_FINISH,
    STEP_START,
    TOOL_RESULT,
    TOOL_WAIT,
    TURN_FINISH,
    StreamEvent,
    live_events,
)
from durable_turns.streams.base import ATTEMPTED

HEADERS = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
"""The protocol's response headers (the ``ai`` package's ``UI_MESSAGE_STREAM_HEADERS``)."""

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keepalive\n\n"
"""An SSE comment: keeps proxies from closing an idle stream; every SSE parser skips it."""

FINISH_REASONS = frozenset({"stop", "length", "content-filter", "tool-calls", "error", "other"})


def dumps(value: Any) -> bytes:
    """``value`` as JSON that a browser's ``JSON.parse`` reads: NaN and ±Infinity, which JSON
    has no words for but the engine's parser accepts (a model's tool call input, a client
    tool's output, a client's metadata can hold them), become ``null``, as ``JSON.stringify``
    makes them; a lone surrogate (never from the engine's own parser) is escaped."""
    try:
        return to_json(value, inf_nan_mode="null")
    except PydanticSerializationError:
        return json.dumps(_finite(value), separators=(",", ":"), allow_nan=False).encode()


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def frame(chunk: dict[str, Any]) -> bytes:
    """One chunk as an SSE frame."""
    return b"data: " + dumps(chunk) + b"\n\n"


def assistant_id(conversation_id: str, turn_number: int) -> str:
    """The UI message id of the reply a turn starts (its stored assistant message id)."""
    return f"{conversation_id}/turn-{turn_number}/assistant"


class UIMessageStream:
    """One reply's chunk stream (its turns' events, in order) as UI message chunks.

    Feed it every event of the reply's first turn, then of each turn a ``turn-finish``
    names in ``continued_by_turn``; it returns the chunks to send for each. It ends the
    reply at the final ``turn-finish`` (``finish``, or ``error`` / ``abort`` first), and
    also when the turn starts waiting for the client (``finish`` with ``tool-calls``: the
    browser answers, then POSTs again to continue the same message).

    ``reset_step``: a retried model step (a ``reset`` event) is sent as ``reset-step`` (ai 7),
    which drops the step's parts in the client. Without it (ai 6 has no such chunk), a
    retried step's new attempt replaces nothing: use :func:`replayable` on what is already
    in the stream, and the front door ends a live reply at a reset with an error asking for
    a resume (see ``docs/web.md``).
    """

    def __init__(self, message_id: str, *, reset_step: bool = True) -> None:
        self.message_id = message_id
        self.reset_step = reset_step
        self.turn: int | None = None
        self.continued_by: int | None = None
        """Set by a ``turn-finish`` whose reply goes on in that turn."""
        self.done = False
        """The reply ended (finished, failed, aborted)."""
        self.waiting: dict[str, dict[str, Any]] = {}
        """Calls the turn waits on, by tool call id (``tool-wait`` events not yet answered)."""
        self.answered_later: set[str] = set()
        """Calls whose results are in the stream already, further on: a replay does not stop
        at their wait."""
        self.needs_resume = False
        """A live reset that this client cannot take (no ``reset_step``)."""
        self._k = 0
        """Text and reasoning parts opened in the current step (their ids count them)."""
        self._restarted: tuple[int | None, int | None] | None = None
        self._text: str | None = None
        self._reasoning: str | None = None
        self._in_step = False
        self._step: tuple[int | None, int | None] | None = None
        self._attempts: dict[tuple[int | None, int | None], int] = {}
        self._step_calls: set[str] = set()
        self._answered: set[str] = set()
        self._sources: list[dict[str, Any]] = []
        self._finish_reason = "stop"
        self._agents: dict[str, AgentProgress] = {}
        """Sub-agents' replies so far, by the parent's tool call id (``agent-chunk``)."""

    def start(self) -> dict[str, Any]:
        return {"type": "start", "messageId": self.message_id}

    def begin_turn(self, turn_number: int) -> None:
        """The next events are this turn's."""
        self.turn = turn_number
        self.continued_by = None

    # --- events -----------------------------------------------------------------------

    def feed(self, ev: StreamEvent) -> list[dict[str, Any]]:
        if self.done:
            return []
        key = (self.turn, ev.step)
        if ev.type == RESET:
            return self._reset(ev, key)
        if (
            ev.type in ATTEMPTED
            and ev.step is not None
            and (ev.attempt or 0) < self._attempts.get(key, 0)
        ):
            return []  # an older attempt still streaming (a worker that lost its activity)
        if ev.type == CHUNK:
            return self._chunk(ev.data)
        if ev.type == STEP_START:
            if self._restarted == key:  # reset-step kept the step's step-start part
                self._restarted = None
                self._in_step = True
                return []
            out = self._end_step()
            out.append({"type": "start-step"})
            self._in_step, self._step, self._step_calls, self._k = True, key, set(), 0
            return out
        if ev.type == STEP_FINISH:
            reason = ev.data.get("finish_reason")
            self._finish_reason = (
                reason if isinstance(reason, str) and reason in FINISH_REASONS else "other"
            )
            return self._close_parts() + self._flush_sources()
        if ev.type == TOOL_RESULT:
            return self._tool_result(ev.data)
        if ev.type == TOOL_WAIT:
            return self._tool_wait(ev.data)
        if ev.type == AGENT_CHUNK:
            return self._agent_chunk(ev.data)
        if ev.type == TURN_FINISH:
            return self._turn_finish(ev.data)
        if ev.type == RECOVERING:
            return [recovering_chunk(self.turn, ev)]
        return []

    def _reset(self, ev: StreamEvent, key: tuple[int | None, int | None]) -> list[dict[str, Any]]:
        attempt = ev.attempt or 0
        self._attempts[key] = max(self._attempts.get(key, 0), attempt)
        if not (self._in_step and self._step == key):
            return []  # nothing of that attempt was sent
        self._text = self._reasoning = None
        self._sources = []
        self._step_calls = set()
        self._k = 0
        if not self.reset_step:
            self.needs_resume = True
            return []
        # reset-step drops the parts after the step's step-start part and keeps that part:
        # the new attempt's step-start is not sent again
        self._restarted = key
        return [{"type": "reset-step"}]

    def _chunk(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        kind = data.get("type")
        out: list[dict[str, Any]] = []
        if kind == "text-delta":
            if self._reasoning is not None:
                out += self._close_reasoning()
            if self._text is None:
                self._text = self._id("text")
                out.append({"type": "text-start", "id": self._text})
            if data.get("text"):
                out.append({"type": "text-delta", "id": self._text, "delta": data["text"]})
        elif kind == "reasoning-delta":
            if self._text is not None:
                out += self._close_text()
            if self._reasoning is None:
                self._reasoning = self._id("reasoning")
                out.append({"type": "reasoning-start", "id": self._reasoning})
            if data.get("text"):
                out.append(
                    {"type": "reasoning-delta", "id": self._reasoning, "delta": data["text"]}
                )
        elif kind == "reasoning-end":
            out += self._close_reasoning()
        elif kind == "tool-input-start":
            out.append(
                {
                    "type": "tool-input-start",
                    "toolCallId": data["tool_call_id"],
                    "toolName": data["tool_name"],
                }
            )
        elif kind == "tool-input-delta":
            out.append(
                {
                    "type": "tool-input-delta",
                    "toolCallId": data["tool_call_id"],
                    "inputTextDelta": data.get("delta", ""),
                }
            )
        elif kind == "tool-call":
            out += self._close_parts()  # the stored step closes its open text at a call
            call_id = data["tool_call_id"]
            self._step_calls.add(call_id)
            chunk = {
                "type": "tool-input-available",
                "toolCallId": call_id,
                "toolName": data["tool_name"],
                "input": data.get("input"),
            }
            out.append(chunk)
        elif kind == "source":
            self._sources.append(_source_chunk(data))
        return out

    def _tool_result(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        call_id = data.get("tool_call_id", "")
        self._answered.add(call_id)
        wait = self.waiting.pop(call_id, None)
        approval = data.get("approval")
        if wait is not None and wait.get("waiting_for") == "approval" and approval is None:
            approval = {"approved": not data.get("is_error")}
        out: list[dict[str, Any]] = []
        if data.get("approval") is not None and self.reset_step:
            # ai 7: the decision itself, so a replay's part holds it as the stored one does
            response = {
                "type": "tool-approval-response",
                "approvalId": call_id,
                "approved": bool(data["approval"].get("approved")),
            }
            if data["approval"].get("reason"):
                response["reason"] = data["approval"]["reason"]
            out.append(response)
        if approval is not None and not approval.get("approved"):
            return [*out, {"type": "tool-output-denied", "toolCallId": call_id}]
        if data.get("is_error"):
            out.append(
                {"type": "tool-output-error", "toolCallId": call_id, "errorText": _text(data)}
            )
            return out
        out.append(
            {"type": "tool-output-available", "toolCallId": call_id, "output": data.get("output")}
        )
        return out

    def _agent_chunk(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        """A sub-agent's event: its reply so far, as the call's preliminary output."""
        call_id = data.get("tool_call_id", "")
        if call_id in self._answered:
            return []
        progress = self._agents.setdefault(call_id, AgentProgress())
        output = progress.feed(data)
        if output is None:
            return []
        output["conversationId"] = data.get("conversation_id")
        return [
            {
                "type": "tool-output-available",
                "toolCallId": call_id,
                "output": output,
                "preliminary": True,
            }
        ]

    def _tool_wait(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        call_id = data.get("tool_call_id", "")
        if call_id in self._answered or call_id in self.waiting:
            return []  # a retried activity announced it again, or it was answered already
        self.waiting[call_id] = data
        out: list[dict[str, Any]] = []
        if isinstance(data.get("agent"), dict):
            # a sub-agent's call (``agent:<agent call>/<its call>``): the model's stream never
            # announced it, so its part starts here, as a call of the parent's step would
            out += self._close_parts()
            out.append(
                {
                    "type": "tool-input-available",
                    "toolCallId": call_id,
                    "toolName": data.get("tool_name", ""),
                    "input": data.get("input"),
                }
            )
        if data.get("waiting_for") == "approval":
            out.append(
                {"type": "tool-approval-request", "approvalId": call_id, "toolCallId": call_id}
            )
        return out

    def step_is_waiting(self) -> bool:
        """Every call of the current step is answered or waits, and some wait (not known to
        be answered already, see :attr:`answered_later`): the turn now waits for the client,
        and the reply's response ends here. Asked right after a ``tool-wait``."""
        pending = self._step_calls - self._answered - self.answered_later
        waiting = set(self.waiting) | {
            str(w["agent"].get("tool_call_id"))  # an agent call whose sub-agent waits
            for w in self.waiting.values()
            if isinstance(w.get("agent"), dict)
        }
        return bool(pending) and pending <= waiting

    def end_waiting(self) -> list[dict[str, Any]]:
        """Close the response at a wait: the step ends, the reply pauses for the client."""
        out = self._end_step()
        out.append({"type": "finish", "finishReason": "tool-calls"})
        return out

    def _turn_finish(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        nxt = data.get("continued_by_turn")
        out = self._close_parts() + self._flush_sources()
        if isinstance(nxt, int):
            self.continued_by = nxt
            return out  # the reply goes on in that turn: its step-start ends this step
        out += self._end_step()
        self.done = True
        status = data.get("status")
        if status == "error":
            error = data.get("error") or {}
            out.append(
                {"type": "error", "errorText": str(error.get("message") or "the turn failed")}
            )
        elif status == "aborted":
            out.append({"type": "abort"})
        reason = {"error": "error", "aborted": "other"}.get(str(status), self._finish_reason)
        finish: dict[str, Any] = {"type": "finish", "finishReason": reason}
        if status == "aborted":  # kept in the message, as the stored reply has it
            finish["messageMetadata"] = {"status": "aborted"}
        out.append(finish)
        return out

    # --- helpers ----------------------------------------------------------------------

    def _id(self, kind: str) -> str:
        """A part's id from its place (turn, step, rank in the step): a replay, and the
        stored message, give the same ids as the live stream, retried steps included."""
        self._k += 1
        step = self._step[1] if self._step else 0
        return part_id(kind, self.turn or 0, step or 0, self._k)

    def _close_text(self) -> list[dict[str, Any]]:
        if self._text is None:
            return []
        out = [{"type": "text-end", "id": self._text}]
        self._text = None
        return out

    def _close_reasoning(self) -> list[dict[str, Any]]:
        if self._reasoning is None:
            return []
        out = [{"type": "reasoning-end", "id": self._reasoning}]
        self._reasoning = None
        return out

    def _close_parts(self) -> list[dict[str, Any]]:
        return self._close_text() + self._close_reasoning()

    def _flush_sources(self) -> list[dict[str, Any]]:
        out, self._sources = self._sources, []
        return out

    def _end_step(self) -> list[dict[str, Any]]:
        out = self._close_parts() + self._flush_sources()
        if self._in_step:
            out.append({"type": "finish-step"})
            self._in_step = False
        return out


class AgentProgress:
    """One sub-agent's reply as its ``agent-chunk`` events build it: the text of each of its
    steps (a ``reset`` of a step, a retried attempt, starts that step's text again), sent
    on when it grew by a tenth (at least ``AGENT_MIN_GROWTH`` characters) or at a boundary
    of the child (a step's or the turn's end, a tool result), so a long reply costs the
    browser a bounded multiple of its size, not its square. An event whose child offset is
    not past the last one seen is a relay's repeat and is dropped."""

    def __init__(self) -> None:
        self.offset = -1
        self.steps: dict[int, str] = {}
        self.attempts: dict[int, int] = {}
        self.sent = -1
        self.status = "running"

    def feed(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """The call's preliminary output after this event, or None (nothing to send)."""
        offset = data.get("offset")
        if not isinstance(offset, int) or offset <= self.offset:
            return None
        self.offset = offset
        found = data.get("event")
        event: dict[str, Any] = found if isinstance(found, dict) else {}
        kind, body = event.get("type"), event.get("data") or {}
        step = _int(event.get("step"), -1)
        attempt = _int(event.get("attempt"), 0)
        boundary = kind in (STEP_FINISH, TOOL_RESULT, TURN_FINISH)
        if kind == RESET:
            self.attempts[step] = max(self.attempts.get(step, 0), attempt)
            self.steps[step] = ""
            boundary = True
        elif kind == CHUNK and body.get("type") == "text-delta":
            if attempt < self.attempts.get(step, 0):
                return None  # an older attempt, still streaming
            self.steps[step] = self.steps.get(step, "") + str(body.get("text") or "")
        if kind == TURN_FINISH:
            self.status = str(body.get("status") or "completed")
        text = "\n\n".join(t for _, t in sorted(self.steps.items()) if t)
        grown = len(text) - max(self.sent, 0)
        if not (boundary or self.sent < 0 or grown >= max(AGENT_MIN_GROWTH, self.sent // 10)):
            return None
        if len(text) == self.sent and not boundary:
            return None
        self.sent = len(text)
        return {"text": text, "status": self.status}


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) else default


AGENT_MIN_GROWTH = 40
"""Characters a sub-agent's reply grows by, at least, between two preliminary outputs."""


def recovering_chunk(turn: int | None, ev: StreamEvent) -> dict[str, Any]:
    """A ``recovering`` event as a transient ``data-recovering`` part: the client hands it
    to ``onData`` (a page shows "recovering…") and keeps it out of the message, which stays
    the stored reply."""
    keys = ("stage", "reason", "message", "attempt", "deaths", "tool_call_id", "tool_name")
    data = {k: ev.data[k] for k in keys if k in ev.data}
    data["step"] = ev.step
    return {
        "type": "data-recovering",
        "id": f"recovering-{turn}-{ev.offset}",
        "data": data,
        "transient": True,
    }


def part_id(kind: str, turn: int, step: int, rank: int) -> str:
    """The id of a text or reasoning part (the client keeps reasoning parts' ids)."""
    return f"{kind}-{turn}-{step}-{rank}"


def replayable(events: Sequence[StreamEvent]) -> list[StreamEvent]:
    """Events already in a stream, without what a later ``reset`` discarded (and without the
    resets): a replay then carries only the attempts that count."""
    return live_events(events)


def _source_chunk(data: dict[str, Any]) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "type": "source-url",
        "sourceId": data.get("id") or data.get("url") or "",
        "url": data.get("url") or "",
    }
    if data.get("title"):
        chunk["title"] = data["title"]
    return chunk


def _text(data: dict[str, Any]) -> str:
    output = data.get("output")
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


# --- stored messages as UIMessages ---------------------------------------------------------


def ui_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """A transcript as the ``UIMessage[]`` a page starts from: one UI message per reply (a
    turn's message with the continuations that carry it on), superseded replies left out."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.metadata.get("superseded_by"):
            continue
        if message.role == "assistant":
            parts = _assistant_parts(message)
            if message.metadata.get("continuation") and out and out[-1]["role"] == "assistant":
                out[-1]["parts"].extend(parts)  # a continuation carries the reply on
                out[-1].pop("metadata", None)  # its last turn says how the reply ended
                out[-1].update(_ended(message))
                continue
            out.append({"id": message.id, "role": "assistant", "parts": parts, **_ended(message)})
        else:
            ui_id = message.metadata.get("ui_message_id")
            ui_id = ui_id if isinstance(ui_id, str) and ui_id else message.id
            out.append({"id": ui_id, "role": message.role, "parts": _user_parts(message)})
    return out


def _ended(message: Message) -> dict[str, Any]:
    """A stopped reply's ``metadata``: ``{"status": "aborted"}``, as the stream's last
    ``finish`` gives it (``messageMetadata``), so a reloaded page can still mark it."""
    if message.metadata.get("status") == "aborted":
        return {"metadata": {"status": "aborted"}}
    return {}


def _user_parts(message: Message) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, FilePart):
            parts.append(_file_part(part))
    return parts


def _file_part(part: FilePart) -> dict[str, Any]:
    url = part.url or f"data:{part.media_type};base64,{part.data or ''}"
    return {"type": "file", "mediaType": part.media_type, "url": url}


def _assistant_parts(message: Message) -> list[dict[str, Any]]:
    """One stored reply's parts, as the stream's chunks assemble them in the client."""
    # The metadata is the engine's for the replies it stores, but a client may send any
    # (a message of any role, with any metadata): what is not of the engine's shape is
    # ignored, never a failed page.
    number = message.metadata.get("turn_number")
    turn = number if isinstance(number, int) and not isinstance(number, bool) else 0
    sources = _dicts_of(message.metadata.get("sources"), list)
    approvals = _dicts_of(message.metadata.get("approvals"), dict)
    parts: list[dict[str, Any]] = []
    tools: dict[str, dict[str, Any]] = {}
    step = -1
    rank = 0

    def end_step() -> None:
        for source in sources.get(str(step), []):
            if not isinstance(source, dict):
                continue
            chunk = _source_chunk(source)
            chunk["type"] = "source-url"
            parts.append(
                {k: v for k, v in chunk.items() if k in ("type", "sourceId", "url", "title")}
            )

    for part in message.parts:
        if isinstance(part, StepStartPart):
            if step >= 0:
                end_step()
            step += 1
            rank = 0
            parts.append({"type": "step-start"})
        elif isinstance(part, TextPart):
            rank += 1
            parts.append({"type": "text", "text": part.text, "state": "done"})
        elif isinstance(part, ReasoningPart):
            rank += 1
            reasoning_id = part_id("reasoning", turn, max(step, 0), rank)
            parts.append(
                {"type": "reasoning", "id": reasoning_id, "text": part.text, "state": "done"}
            )
        elif isinstance(part, ToolCallPart):
            tool: dict[str, Any] = {
                "type": f"tool-{part.tool_name}",
                "toolCallId": part.tool_call_id,
                "state": "input-available",
                "input": part.input,
            }
            approval = approvals.get(part.tool_call_id)
            if approval is not None:
                tool["approval"] = _approval(part.tool_call_id, approval)
                tool["state"] = "approval-responded"
            tools[part.tool_call_id] = tool
            parts.append(tool)
        elif isinstance(part, ToolResultPart):
            tool = tools.get(part.tool_call_id) or {}
            if not tool:
                continue
            approval = approvals.get(part.tool_call_id)
            if approval is not None and not approval.get("approved"):
                tool["state"] = "output-denied"
            elif part.is_error:
                tool["state"] = "output-error"
                tool["errorText"] = _text({"output": part.output})
            else:
                tool["state"] = "output-available"
                tool["output"] = part.output
        elif isinstance(part, FilePart):
            parts.append(_file_part(part))
    if step >= 0:
        end_step()
    return parts


def _approval(call_id: str, approval: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": call_id, "approved": bool(approval.get("approved"))}
    if approval.get("reason"):
        out["reason"] = approval["reason"]
    return out


def _dicts_of(value: Any, kind: type) -> dict[str, Any]:
    """``value`` if it is a dict, with only its entries of type ``kind``."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(v, kind)}
