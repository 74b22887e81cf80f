"""The conversation's decisions as a state machine without the SDK (sans-I/O, like ``h11``).

:class:`Conversation` is fed what happens to a conversation (a request's JSON value, a turn's
result, a cancel, a timer's end, a hand-over) and answers with what to do (start a turn and
with which input, cancel it, forward a tool result, answer an update, show a rejection,
wait for quiet, continue as new with what). It owns every decision: intake and validation,
the queue and its bounds, every message concurrency (``queue``, ``merge``, ``latest``,
``drop``, ``debounce``), rejections, what runs next and what continue-as-new carries.
``workflows.conversation`` is the shell that runs it on Temporal: it decodes payloads,
starts child turns, runs activities and timers, and carries out the answers.

Its state is :attr:`Conversation.state`, the ``ConversationInput`` that started the run and
that continue-as-new carries, kept up to date in place (the queue, finished records, results,
rejections, counters, the last request's body, model and metadata). Beside it, the run's own
transient facts that are never carried: the running request, whether its child turn exists,
debounce arrivals, tool results waiting to be forwarded, and an index of the records by
request id. No ``temporalio`` import: the clock and random ids come in as arguments (the
shell passes ``workflow.now()`` and ``workflow.uuid4``), so the machine is tested without a
server (``tests/test_conversation_machine.py``). Every ``ConversationInput`` field it keeps
is the wire contract's (``durable_turns.contract``).

One module past the engine's usual ~500 lines: the machine's state and the invariants over it
(no request lost or answered twice, order kept, one turn at a time, every bound held) are one
class; split in two, each half would reach into the other's fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_core import to_json

from durable_turns.contract import (
    CONVERSATION_BUSY,
    DEFAULT_DEBOUNCE_MS,
    EMPTY_MESSAGE,
    INVALID_ID,
    INVALID_REQUEST,
    MAX_CARRIED_BYTES,
    MAX_CARRIED_RESULT_BYTES,
    MAX_QUEUED_BYTES,
    MAX_QUEUED_REQUESTS,
    MAX_STORED_REQUEST_BYTES,
    MAX_TOOL_RESULT_BYTES,
    MESSAGE_ID_CONFLICT,
    QUEUE_FULL,
    REQUEST_EXPIRED,
    REQUEST_TOO_LARGE,
    TURN_START_FAILED,
    AddMessages,
    CancelChat,
    ContinueLastTurn,
    ConversationInput,
    ConversationOpened,
    ConversationState,
    ErrorInfo,
    PendingRequest,
    RequestRecord,
    SubmitMessages,
    TurnInput,
    TurnResult,
    empty_message_problem,
    id_problem,
    turn_workflow_id,
    validation_problems,
)
from durable_turns.errors import Rejected
from durable_turns.messages import Message

RECENT = 50
"""How many finished requests ``state`` remembers (and carries over continue-as-new)."""

RECENT_REJECTED = 20
"""How many rejected requests ``state`` shows (``rejected_count`` counts them all)."""

LOGGED_REJECTIONS = 3
"""Rejections logged one by one per run; after that, one line per thousand (a burst of
malformed signals must stay cheap: they are all handled in one workflow activation)."""

TURN_START_ATTEMPTS = 3
"""Workflow ids tried for a turn's child (the derived id, then random suffixes)."""

MAX_PENDING_TOOL_RESULT_BYTES = 4 * 1024 * 1024
"""Tool results waiting to be forwarded to the turn (one per workflow task); past it,
``QueueFull``. In memory only: those still waiting when the turn ends are dropped."""

MERGING = ("merge", "latest", "debounce")
"""The message concurrencies whose waiting messages are answered together in one turn."""

SUBMIT, CONTINUE, CANCEL, ADD, TOOL_RESULT = "submit", "continue", "cancel", "add", "tool"
"""The kinds of signal :meth:`Conversation.signal` takes (the shell maps wire names to them)."""


# --- decisions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    """Show a rejection: ``details`` for the UI, ``log`` a warning line (None: not logged)."""

    details: str
    log: str | None


@dataclass(frozen=True)
class CancelTurn:
    """Cancel the running turn (it ends ``aborted`` with what it streamed)."""


@dataclass(frozen=True)
class ForwardToolResults:
    """Tool results wait: forward them (:meth:`Conversation.take_tool_result`), one at a time."""


Decision = Note | CancelTurn | ForwardToolResults


@dataclass
class TurnStart:
    """Start the child turn ``input`` under ``workflow_id``."""

    request: PendingRequest
    number: int
    workflow_id: str
    input: TurnInput
    summary: str
    details: str


@dataclass(frozen=True)
class TurnDone:
    """A turn's result was taken: show ``details``; run ``on_chat_response`` if ``respond``."""

    details: str
    respond: bool


# --- the machine -------------------------------------------------------------------------


class Conversation:
    """One conversation run's decisions; :attr:`state` is what continue-as-new carries."""

    def __init__(
        self, conversation_id: str, state: ConversationInput | None, new_id: Callable[[], str]
    ) -> None:
        self.id = conversation_id
        self.state = state if state is not None else ConversationInput()
        self.new_id = new_id
        self.id_problem = id_problem(conversation_id)
        s = self.state
        self.queued_bytes = sum(p.size for p in s.queue)
        """What the queue holds, as stored (``PendingRequest.size``, its JSON)."""
        self.records: dict[str, RequestRecord] = {r.request_id: r for r in s.recent}
        """Every record by request id: finished (``state.recent``), queued, running, merged."""
        for p in s.queue:
            self.records[p.request_id] = RequestRecord(request_id=p.request_id, kind=p.kind)  # type: ignore[arg-type]
        self.results: dict[str, TurnResult] = {r.request_id: r for r in s.results}
        self.running: PendingRequest | None = None
        self.turn_running = False
        """The running request's child turn exists (cancels and tool results reach it)."""
        self.handing_over = False
        self.waiting_for: str | None = None
        self.arrivals = 0
        """Turn requests queued so far in this run (``debounce`` waits until it stops moving)."""
        self.last_arrival: datetime | None = None
        self.logged_rejections = 0
        self.tool_results: list[tuple[Any, int]] = []
        self.tool_result_bytes = 0

    # --- the loop ----------------------------------------------------------------------

    def opened(self, opened: ConversationOpened) -> str:
        """The store answered ``open_conversation_with_defaults``; the details to show."""
        self.state.turn_count = opened.turn_count
        self.state.worker_concurrency = opened.message_concurrency
        self.state.worker_debounce_ms = opened.debounce_ms
        self.waiting_for = None
        return f"open · {opened.turn_count} turn(s) so far"

    def debounces(self, request: PendingRequest) -> bool:
        return request.kind == SUBMIT and self.concurrency(request) == "debounce"

    def quiet_left(self, ms: int, now: datetime) -> float | None:
        """Milliseconds until no turn request has come for ``ms`` (None: quiet enough)."""
        if self.last_arrival is None:
            return None
        quiet = (now - self.last_arrival).total_seconds() * 1000
        return None if quiet >= ms else ms - quiet

    def take_next(self) -> PendingRequest:
        """The head of the queue, out of it, with the merging requests behind it folded in."""
        request = self.state.queue.pop(0)
        self.queued_bytes -= request.size
        if request.kind == SUBMIT and self.concurrency(request) in MERGING:
            self._merge_waiting(request)
        return request

    def _merge_waiting(self, request: PendingRequest) -> None:
        """Fold the turn requests waiting right behind ``request`` that merge too into it, in
        order (their messages after its own; the newest body, model and metadata win), as far
        as the stored request bound allows; they finish with its turn."""
        queue = self.state.queue
        while queue:
            nxt = queue[0]
            if nxt.kind != SUBMIT or self.concurrency(nxt) not in MERGING:
                return
            if request.size + nxt.size > MAX_STORED_REQUEST_BYTES:
                return
            queue.pop(0)
            self.queued_bytes -= nxt.size
            request.messages = [*request.messages, *nxt.messages]
            request.body, request.model = nxt.body or request.body, nxt.model or request.model
            request.metadata = nxt.metadata or request.metadata
            request.merged = [*request.merged, nxt.request_id, *nxt.merged]
            request.size += nxt.size
            record = self.records.get(nxt.request_id)
            if record is not None:
                record.status = "running"
                record.merged_into = request.request_id

    def turn_begins(self, request: PendingRequest) -> TurnStart:
        """``request``'s turn gets the next number: what to start."""
        assert self.state.turn_count is not None
        self.state.turn_count += 1
        number = self.state.turn_count
        self.running = request
        model = request.model or self.state.model
        return TurnStart(
            request=request,
            number=number,
            workflow_id=turn_workflow_id(self.id, number),
            input=TurnInput(
                conversation_id=self.id,
                turn_number=number,
                request_id=request.request_id,
                new_messages=request.messages,
                continuation=request.kind == CONTINUE,
                body=request.body,
                model=model,
                max_steps=self.state.max_steps,
                regenerate=request.regenerate,
                metadata=request.metadata,
            ),
            summary=summary(number, self.id, model, request.kind),
            details=details(request),
        )

    def turn_start_failed(self, start: TurnStart, attempt: int, error: str) -> TurnResult | None:
        """The child could not start (its id taken, or otherwise): None, and ``start`` has the
        next id to try (a random, readable suffix); after the last attempt, the turn's result,
        a typed error (the conversation never fails over it)."""
        if attempt == TURN_START_ATTEMPTS - 1:
            return TurnResult(
                request_id=start.request.request_id,
                conversation_id=self.id,
                turn_number=start.number,
                workflow_id="",
                status="error",
                continuation=start.input.continuation,
                error=ErrorInfo(
                    type=TURN_START_FAILED,
                    message=f"could not start turn {start.number}: {error}",
                    stage="turn",
                ),
                metadata=start.request.metadata,
            )
        suffix = self.new_id().replace("-", "")[:8]
        start.workflow_id = f"{turn_workflow_id(self.id, start.number)}~{suffix}"
        return None

    def turn_started(self, start: TurnStart) -> None:
        """Only now does the turn exist for clients that look it up by number."""
        record = self.records[start.request.request_id]
        record.status, record.turn_number = "running", start.number
        record.workflow_id = start.workflow_id
        self.turn_running = True

    def turn_failed(self, start: TurnStart, error_type: str, message: str) -> TurnResult:
        """The child turn failed (not a result of its own): an error result."""
        return TurnResult(
            request_id=start.request.request_id,
            conversation_id=self.id,
            turn_number=start.number,
            workflow_id=start.workflow_id,
            status="error",
            continuation=start.input.continuation,
            error=ErrorInfo(type=error_type, message=message, stage="turn"),
            metadata=start.request.metadata,
        )

    def turn_ended(self) -> None:
        """No turn runs any more (whatever its result); waiting tool results go nowhere."""
        self.running = None
        self.turn_running = False

    def turn_done(self, request: PendingRequest, result: TurnResult) -> TurnDone:
        """``request`` (and those merged into it) finish with ``result``; a turn whose client
        tools were answered is continued before anything else."""
        s = self.state
        record = self.records[request.request_id]
        record.status = result.status
        record.error = result.error
        self._finish(request.request_id, result)
        for merged in request.merged:  # answered by this turn too
            other = self.records.get(merged)
            if other is not None:
                other.status, other.error = result.status, result.error
                other.turn_number, other.workflow_id = record.turn_number, record.workflow_id
            self._finish(merged, result.model_copy(update={"request_id": merged}))
        s.last_result = result
        s.usage = s.usage + result.usage
        if result.cost_usd is not None:
            s.cost_usd = (s.cost_usd or 0.0) + result.cost_usd
        shown = (
            f"turn {result.turn_number}: **{result.status}**"
            + (f" — {result.error.message}" if result.error else "")
            + self.notes()
        )
        if result.auto_continue:  # client tool results arrived: continue before anything else
            follow = PendingRequest(
                request_id=self.new_id(),
                kind=CONTINUE,
                body=request.body,
                model=request.model,
                metadata=request.metadata,
            )
            sized(follow)
            s.queue.insert(0, follow)
            self.queued_bytes += follow.size
            self.records[follow.request_id] = RequestRecord(
                request_id=follow.request_id, kind="continue"
            )
        return TurnDone(shown, result.status != "skipped" and result.respond)

    def add_begins(self, request: PendingRequest) -> str:
        """An ``addMessages`` request's place in the queue has come: the details to show."""
        self.records[request.request_id].status = "running"
        self.running = request
        return f"adding {len(request.messages)} message(s) (request `{request.request_id}`)"

    def add_done(self, request: PendingRequest) -> str:
        """Its messages are in the store."""
        self.records[request.request_id].status = "completed"
        self._finish(
            request.request_id,
            TurnResult(
                request_id=request.request_id,
                conversation_id=self.id,
                turn_number=0,
                workflow_id="",
                status="completed",
            ),
        )
        return f"added {len(request.messages)} message(s)" + self.notes()

    def _finish(self, request_id: str, result: TurnResult) -> None:
        s = self.state
        self.results[request_id] = result
        s.results.append(result)
        while len(self.results) > RECENT:
            del self.results[s.results.pop(0).request_id]
        record = self.records.get(request_id)
        if record is not None:
            s.recent.append(record)
        while len(s.recent) > RECENT:
            old = s.recent.pop(0)
            known = self.records.get(old.request_id)
            if known is not None and known.status not in ("queued", "running"):
                del self.records[old.request_id]

    def hand_over(self) -> None:
        """The run continues as new: updates still waiting are told to retry there."""
        self.handing_over = True

    def carry(self) -> ConversationInput:
        """What continue-as-new carries: the state, bounded whatever was queued or answered
        (the queue by MAX_QUEUED_BYTES, results by MAX_CARRIED_RESULT_BYTES, newest first,
        records by RECENT), and the whole cut to MAX_CARRIED_BYTES (:func:`fit`)."""
        s = self.state
        results: list[TurnResult] = []
        budget = MAX_CARRIED_RESULT_BYTES
        for result in reversed(s.results):
            size = len(result.model_dump_json())
            if size > budget:
                continue  # too large to carry: a retry gets RequestExpired
            budget -= size
            results.append(result)
        last = s.last_result
        if last is not None and len(last.text) > 4096:
            last = last.model_copy(update={"text": last.text[:4096] + "…"})
        return fit(
            s.model_copy(
                update={
                    "queue": list(s.queue),
                    "recent": list(s.recent),
                    "results": results[::-1],
                    "rejected": list(s.rejected),
                    "last_result": last,
                }
            )
        )

    # --- requests ----------------------------------------------------------------------

    def signal(self, kind: str, value: Any, size: int, now: datetime) -> list[Decision]:
        """A signal's JSON ``value`` (``size``: its payload's bytes), decoded; never raises:
        a request the conversation will not take is a rejection (:class:`Note`)."""
        if kind == TOOL_RESULT:
            return self.tool_result(value)
        try:
            if kind == SUBMIT:
                return self._enqueue(self._parse_submit(value), size, now)[1]
            if kind == CONTINUE:
                self._take_continue(value)
            elif kind == ADD:
                self._take_add(value)
            else:
                return self._take_cancel(value)
        except Rejected as e:
            return self.reject(value, e.type, e.message)
        return []

    def admit(self, value: Any, size: int, now: datetime) -> tuple[str, list[Decision]]:
        """An update's request: queued (or the one its request id names); its request id.
        Raises :class:`Rejected` (the update fails with it)."""
        request = self._parse_submit(value)
        request_id = request.request_id or ""
        if request_id in self.records:
            return request_id, []
        return self._enqueue(request, size, now)

    def validate(self, value: Any) -> None:
        """An update's validator: raises :class:`Rejected` for what the handler would refuse
        (what it would keep, measured as it would; nothing is kept here)."""
        if self.id_problem:
            raise Rejected(INVALID_ID, f"invalid conversation id: {self.id_problem}")
        request = self._parse_submit(value)
        if request.request_id is None or request.request_id not in self.records:
            # an update's validator only (validators never run on replay): an empty message
            # is refused here; a signal's, recorded, is taken as it always was
            if problem := empty_message_problem(request.messages):
                raise Rejected(EMPTY_MESSAGE, problem)
            pending = self._pending(
                request.messages,
                request.request_id or "-" * 36,
                body=request.body,
                model=request.model,
                metadata=request.metadata,
            )
            self._check_room(pending.size)

    def expired(self, request_id: str) -> Rejected | None:
        """A request that finished in an earlier run and whose result is no longer held."""
        known = self.records[request_id]
        if request_id in self.results or known.status in ("queued", "running"):
            return None
        return Rejected(
            REQUEST_EXPIRED,
            f"request {request_id!r} finished ({known.status}) in an earlier run of the"
            " conversation and its result is no longer held; read it from the turn"
            f" workflow {known.workflow_id or '(none)'} or the transcript",
        )

    @staticmethod
    def started(record: RequestRecord) -> bool:
        """``startTurn``'s answer is ready: the turn has a number, or the request ended."""
        return record.turn_number is not None or record.status not in ("queued", "running")

    def _parse_submit(self, value: Any) -> SubmitMessages:
        if self.id_problem:
            raise Rejected(INVALID_ID, f"invalid conversation id: {self.id_problem}")
        return validated(SubmitMessages, value)

    def _enqueue(self, req: SubmitMessages, size: int, now: datetime) -> tuple[str, list[Decision]]:
        """Queue ``req`` (``size``: its payload's bytes); its request id."""
        s = self.state
        if req.request_id is not None and req.request_id in self.records:
            return req.request_id, []  # idempotent: the same request id is accepted once
        if req.regenerate is not None:
            self._check_room(size)
            return self._enqueue_regenerate(req, req.request_id or self.new_id(), size), []
        concurrency = self.concurrency(req)
        if concurrency == "drop" and self.busy():
            raise Rejected(
                CONVERSATION_BUSY,
                "a turn is running or waiting and this conversation's message concurrency is"
                " 'drop': send it again once the conversation is idle",
            )
        request_id = req.request_id or self.new_id()
        pending = self._pending(
            req.messages, request_id, body=req.body, model=req.model, metadata=req.metadata
        )
        self._check_room(pending.size)
        pending.concurrency, pending.debounce_ms = req.message_concurrency, req.debounce_ms
        s.queue.append(pending)
        self.queued_bytes += pending.size
        self.records[request_id] = RequestRecord(request_id=request_id)
        s.last_body, s.last_model, s.last_metadata = req.body, req.model, req.metadata
        self.arrivals += 1
        self.last_arrival = now
        if concurrency == "latest" and self.turn_running and self.running is not None:
            return request_id, [CancelTurn()]  # answered next, in one turn
        return request_id, []

    def _enqueue_regenerate(self, req: SubmitMessages, request_id: str, size: int) -> str:
        """A regeneration: no new messages; the marking is ``begin_turn``'s. Without a
        ``body`` or ``model``, the last request's (as ``continueLastTurn``)."""
        s = self.state
        given = req.model_fields_set
        body = req.body if "body" in given else s.last_body
        model = req.model if "model" in given else s.last_model
        metadata = req.metadata if "metadata" in given else s.last_metadata
        s.queue.append(
            PendingRequest(
                request_id=request_id,
                kind="regenerate",
                regenerate=req.regenerate,
                body=body,
                model=model,
                size=size,
                metadata=metadata,
            )
        )
        self.queued_bytes += size
        self.records[request_id] = RequestRecord(request_id=request_id, kind="regenerate")
        s.last_body, s.last_model, s.last_metadata = body, model, metadata
        return request_id

    def _take_continue(self, value: Any) -> None:
        s = self.state
        req = validated(ContinueLastTurn, value or {})
        request_id = req.request_id or self.new_id()
        if request_id in self.records:
            return
        pending = sized(
            PendingRequest(
                request_id=request_id,
                kind=CONTINUE,
                body=req.body if req.body is not None else s.last_body,
                model=s.last_model,
                metadata=req.metadata if req.metadata is not None else s.last_metadata,
            )
        )
        self._check_room(pending.size)
        s.queue.append(pending)
        self.queued_bytes += pending.size
        self.records[request_id] = RequestRecord(request_id=request_id, kind="continue")

    def _take_add(self, value: Any) -> None:
        req = validated(AddMessages, value)
        if self.id_problem:
            raise Rejected(INVALID_ID, f"invalid conversation id: {self.id_problem}")
        request_id = req.request_id or req.derived_request_id() or self.new_id()
        if request_id in self.records:
            return  # idempotent: accepted once
        pending = self._pending(req.messages, request_id, kind=ADD)
        self._check_room(pending.size)
        self.state.queue.append(pending)
        self.queued_bytes += pending.size
        self.records[request_id] = RequestRecord(request_id=request_id, kind="add")

    def _take_cancel(self, value: Any) -> list[Decision]:
        """A queued request never runs; the running turn ends ``aborted`` (without a request
        id: the running turn only)."""
        try:
            req = CancelChat.model_validate(value or {})
        except ValidationError as e:
            raise Rejected(INVALID_REQUEST, explain(e)) from None
        target = req.request_id
        queue = self.state.queue
        if target is not None:
            for pending in queue:
                if pending.request_id == target:
                    queue.remove(pending)
                    self.queued_bytes -= pending.size
                    self.records[target].status = "aborted"
                    self._finish(
                        target,
                        TurnResult(
                            request_id=target,
                            conversation_id=self.id,
                            turn_number=0,
                            workflow_id="",
                            status="aborted",
                            continuation=pending.kind == CONTINUE,
                            metadata=pending.metadata,
                        ),
                    )
                    return []
        running = self.running
        if self.turn_running and running and target in (None, running.request_id):
            return [CancelTurn()]
        return []

    def tool_result(self, value: Any) -> list[Decision]:
        """A client tool's result or approval for the running turn, to forward."""
        if not self.turn_running:
            return self.reject(
                value, INVALID_REQUEST, "no turn is running, so no tool call is waiting"
            )
        size = len(to_json(value))  # as it will be forwarded (re-encoding can grow it)
        if size > MAX_TOOL_RESULT_BYTES:
            return self.reject(
                None,
                REQUEST_TOO_LARGE,
                f"tool result is {size} bytes as forwarded; the limit is {MAX_TOOL_RESULT_BYTES}",
            )
        if self.tool_result_bytes + size > MAX_PENDING_TOOL_RESULT_BYTES:
            return self.reject(
                value,
                QUEUE_FULL,
                f"{self.tool_result_bytes} bytes of tool results are waiting to reach the"
                f" turn (limit {MAX_PENDING_TOOL_RESULT_BYTES}): retry in a moment",
            )
        self.tool_results.append((value, size))
        self.tool_result_bytes += size
        return [ForwardToolResults()]

    def take_tool_result(self) -> tuple[Any] | None:
        """The next tool result to forward (in a 1-tuple: the value may be None), if any."""
        if not self.tool_results:
            return None
        value, size = self.tool_results.pop(0)
        self.tool_result_bytes -= size
        return (value,)

    def reject(self, value: Any, error_type: str, message: str) -> list[Decision]:
        """Record a rejection: O(1), bounded memory, aggregated logging (bursts stay cheap)."""
        s = self.state
        s.rejected_count += 1
        given = value.get("request_id") if isinstance(value, dict) else None
        request_id = (
            given
            if isinstance(given, str) and given not in self.records and id_problem(given) is None
            else f"rejected-{s.rejected_count}"
        )
        error = ErrorInfo(type=error_type, message=message, stage="parse")
        s.rejected.append(RequestRecord(request_id=request_id, status="rejected", error=error))
        del s.rejected[:-RECENT_REJECTED]
        log = None
        if self.logged_rejections < LOGGED_REJECTIONS:
            self.logged_rejections += 1
            log = f"rejected request {request_id}: {message}"
        elif s.rejected_count % 1000 == 0:
            log = f"{s.rejected_count} requests rejected so far"
        shown = f"**rejected request** `{request_id}` ({error_type}): {message}" + self.notes()
        return [Note(shown, log)]

    # --- what it knows -----------------------------------------------------------------

    def concurrency(self, request: PendingRequest | SubmitMessages) -> str:
        """What ``request`` does while a turn runs or waits: its own setting, the
        conversation's, the worker's, else ``queue``."""
        own = (
            request.concurrency
            if isinstance(request, PendingRequest)
            else request.message_concurrency
        )
        s = self.state
        return own or s.message_concurrency or s.worker_concurrency or "queue"

    def debounce_ms(self, request: PendingRequest) -> int:
        s = self.state
        for value in (request.debounce_ms, s.debounce_ms, s.worker_debounce_ms):
            if value is not None:
                return value
        return DEFAULT_DEBOUNCE_MS

    def busy(self) -> bool:
        """A turn runs or waits (what ``drop`` refuses and ``latest`` interrupts)."""
        return self.running is not None or any(p.kind != ADD for p in self.state.queue)

    def full(self, size: int = 0) -> bool:
        return (
            len(self.state.queue) >= MAX_QUEUED_REQUESTS
            or self.queued_bytes + size > MAX_QUEUED_BYTES
        )

    def _check_room(self, size: int) -> None:
        """Admission control: past the bound, a typed ``QueueFull``, never silent loss."""
        if self.full(size):
            raise Rejected(
                QUEUE_FULL,
                f"the conversation's queue is full ({len(self.state.queue)} requests,"
                f" {self.queued_bytes} bytes; limits {MAX_QUEUED_REQUESTS} requests,"
                f" {MAX_QUEUED_BYTES} bytes): retry once it drains",
            )

    def _pending(self, given: list[Message], request_id: str, **fields: Any) -> PendingRequest:
        """The request of messages ``given`` (and ``fields``) as the conversation keeps it,
        sized as kept; raises Rejected."""
        # Message ids are scoped to their request: a client-chosen id can neither collide
        # with another request's messages nor with the engine's own (turn-derived) ids.
        messages = [
            m.model_copy(update={"id": f"{request_id}/{m.id or i}"}) for i, m in enumerate(given)
        ]
        if len({m.id for m in messages}) != len(messages):
            raise Rejected(
                MESSAGE_ID_CONFLICT, "two messages of the request would have the same id"
            )
        pending = sized(PendingRequest(request_id=request_id, messages=messages, **fields))
        if pending.size > MAX_STORED_REQUEST_BYTES:
            raise Rejected(
                REQUEST_TOO_LARGE,
                f"request is {pending.size} bytes as the conversation keeps it ({len(messages)}"
                " message(s), each with its id scoped to the request); the limit is"
                f" {MAX_STORED_REQUEST_BYTES} bytes. Send fewer, larger messages, or large"
                " content by reference.",
            )
        return pending

    def notes(self) -> str:
        notes = []
        s = self.state
        if s.rejected_count:
            notes.append(f"{s.rejected_count} request(s) rejected so far")
        if self.full():
            notes.append(
                f"**queue full** ({len(s.queue)} requests, {self.queued_bytes} bytes):"
                " new requests are rejected with QueueFull until it drains"
            )
        return "".join(f"\n\n{n}" for n in notes)

    def view(self) -> ConversationState:
        """The ``state`` query's answer."""
        s = self.state
        running = self.records.get(self.running.request_id) if self.running else None
        return ConversationState(
            conversation_id=self.id,
            turn_count=s.turn_count or 0,
            running=running,
            queue=[self.records[p.request_id] for p in s.queue],
            recent=[*s.recent, *s.rejected],
            last_result=s.last_result,
            usage=s.usage,
            cost_usd=s.cost_usd,
            queued_count=len(s.queue),
            rejected_count=s.rejected_count,
            waiting_for=self.waiting_for or ("queue_full" if self.full() else None),
            message_concurrency=s.message_concurrency or s.worker_concurrency or "queue",
        )


# --- pure helpers ------------------------------------------------------------------------


def sized(pending: PendingRequest) -> PendingRequest:
    """``pending`` with its ``size``: its JSON as it will be sent (the turn's input, and what
    continue-as-new carries of it)."""
    pending.size = len(to_json(pending))
    return pending


def fit(carry: ConversationInput) -> ConversationInput:
    """``carry`` within MAX_CARRIED_BYTES: what it holds beside the queue is left behind, the
    least needed and oldest first (results: a retry gets RequestExpired; rejected records;
    finished records), until it fits. Measured once per hand-over."""
    size = len(to_json(carry))
    for field in ("results", "rejected", "recent"):
        items: list[Any] = getattr(carry, field)
        while size > MAX_CARRIED_BYTES and items:
            size -= len(to_json(items.pop(0))) + 1
    if size > MAX_CARRIED_BYTES:  # a body as large as a request: the continuation's default
        carry.last_body = {}
        carry.last_metadata = {}
    return carry


def explain(error: ValidationError) -> str:
    return f"malformed request: {validation_problems(error, limit=5)}"


Request = TypeVar("Request", SubmitMessages, ContinueLastTurn, AddMessages)


def validated(model: type[Request], value: Any) -> Request:
    """``value`` as the request ``model``, or a ``Rejected`` (InvalidRequest) saying why not."""
    try:
        return model.model_validate(value)
    except ValidationError as e:
        raise Rejected(INVALID_REQUEST, explain(e)) from None


def summary(number: int, conversation_id: str, model: str | None, request_kind: str) -> str:
    kind = {"continue": "continuation", "regenerate": "regeneration"}.get(request_kind, "turn")
    text = f"{kind} {number} · conv {conversation_id}" + (f" · {model}" if model else "")
    return text[:200]


def details(request: PendingRequest) -> str:
    lines = [f"**request** `{request.request_id}` ({request.kind})"]
    if request.regenerate is not None:
        lines.append(f"**regenerates** `{request.regenerate}`")
    for message in request.messages:
        head = message.text[:500]
        lines.append(f"### {message.role}\n{head}")
    if request.body:
        lines.append("**body**: `" + json.dumps(request.body)[:500] + "`")
    if request.metadata:
        lines.append("**metadata**: `" + json.dumps(request.metadata)[:500] + "`")
    return "\n\n".join(lines)[:20000]
