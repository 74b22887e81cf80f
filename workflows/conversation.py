"""``ConversationWorkflow``: one per conversation id; the turn lock and the request queue.

It keeps only small state: the queue of pending requests (each with its new messages), the
turn counter and recent outcomes. Each turn runs as a child ``TurnWorkflow``, one at a
time, so turns of one conversation never overlap. Signals take raw JSON and validate it
here, because a signal whose argument fails to decode is silently dropped by the SDK: a
malformed request is instead recorded as ``rejected`` with a typed error that ``state`` and
the UI show, and the conversation goes on.
"""

# No ``from __future__ import annotations`` here: the sandbox re-imports this module for
# every workflow run, and temporalio reads the handlers' type hints each time; evaluated
# annotations spare it compiling each string again (~0.4 ms a module exec, measured
# outside the sandbox).

import asyncio
import functools
import json
from collections import deque
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_core import to_json
from temporalio import workflow
from temporalio.common import RawValue, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError, ChildWorkflowError, FailureError

with workflow.unsafe.imports_passed_through():
    from durable_turns.contract import (
        ADD_MESSAGES,
        CONVERSATION_BUSY,
        CONVERSATION_ID,
        CONVERSATION_WORKFLOW,
        DEFAULT_DEBOUNCE_MS,
        HANDED_OVER,
        INVALID_ID,
        INVALID_REQUEST,
        MAX_CARRIED_BYTES,
        MAX_CARRIED_RESULT_BYTES,
        MAX_QUEUED_BYTES,
        MAX_QUEUED_REQUESTS,
        MAX_REQUEST_BYTES,
        MAX_STORED_REQUEST_BYTES,
        MAX_TOOL_RESULT_BYTES,
        MESSAGE_ID_CONFLICT,
        OPEN_CONVERSATION,
        OPEN_CONVERSATION_WITH_DEFAULTS,
        QUERY_STATE,
        QUEUE_FULL,
        REQUEST_EXPIRED,
        REQUEST_TOO_LARGE,
        SIGNAL_ADD,
        SIGNAL_CANCEL,
        SIGNAL_CONTINUE,
        SIGNAL_SUBMIT,
        SIGNAL_TOOL_RESULT,
        TURN_SIGNAL_TOOL_RESULT,
        TURN_START_FAILED,
        TURN_STATUS,
        TURN_WORKFLOW,
        UNKNOWN_SIGNAL,
        UPDATE_SEND,
        UPDATE_START,
        AddMessages,
        CancelChat,
        ContinueLastTurn,
        ConversationInput,
        ConversationOpened,
        ConversationSettings,
        ConversationState,
        ErrorInfo,
        PendingRequest,
        RequestRecord,
        SubmitMessages,
        TurnInput,
        TurnResult,
        id_problem,
        turn_workflow_id,
        validation_problems,
    )
    from durable_turns.messages import Message
    from durable_turns.workflows import options, patches
    from durable_turns.workflows.intake import (
        ABSENT,
        Inbox,
        Rejected,
        decode,
        payload_size,
        unfold,
    )

RECENT = 50
"""How many finished requests ``state`` remembers (and carries over continue-as-new)."""

MAX_PENDING_TOOL_RESULT_BYTES = 4 * 1024 * 1024
"""Tool results waiting to be forwarded to the turn (one per workflow task); past it,
``QueueFull``. In memory only: those still waiting when the turn ends are dropped."""

RECENT_REJECTED = 20
"""How many rejected requests ``state`` shows (``rejected_count`` counts them all)."""

LOGGED_REJECTIONS = 3
"""Rejections logged one by one per run; after that, one line per thousand (a burst of
malformed signals must stay cheap: they are all handled in one workflow activation)."""

TURN_START_ATTEMPTS = 3
"""Workflow ids tried for a turn's child (the derived id, then random suffixes)."""

PATCH_HANDOVER_WITH_QUEUE = "conversation-continue-as-new-with-queue"
"""Continue-as-new between turns even with requests still queued."""

PATCH_STORED_SIZES = "conversation-requests-sized-as-kept"
"""Requests are sized as the conversation keeps them (and refused past MAX_STORED_REQUEST_BYTES);
runs recorded before sized them as they came (and a continuation inheriting a body as 0)."""

PATCH_FORWARD_ONE_AT_A_TIME = "conversation-forward-tool-results-one-at-a-time"
"""Tool results reach the turn one signal per workflow task (before: one each, all at once)."""

INBOX_SIGNALS = frozenset(
    {SIGNAL_SUBMIT, SIGNAL_CONTINUE, SIGNAL_CANCEL, SIGNAL_TOOL_RESULT, SIGNAL_ADD}
)

PATCH_INBOX = "conversation-signals-through-inbox"
"""Signals are put in the inbox as they come and parsed a bounded amount per workflow task
(``workflows.intake.Inbox``); runs recorded before parsed each in its handler."""


PATCH_METADATA = "conversation-request-metadata"
"""Requests may carry ``metadata``; runs recorded before rejected it as an unknown field."""


_REJECTED = object()
"""What reading a request gives when it was rejected (None is a JSON value)."""


def _failure(rejected: Rejected) -> ApplicationError:
    return ApplicationError(rejected.message, type=rejected.type, non_retryable=True)


PATCH_WORKER_DEFAULTS = "conversation-opens-with-worker-defaults"
"""The conversation reads the worker's defaults (message concurrency) when it opens."""

MERGING = ("merge", "latest", "debounce")
"""The message concurrencies whose waiting messages are answered together in one turn."""

LOCAL_OPEN_PATCH = "local-open-conversation"
"""Conversations recorded before it ran ``open_conversation`` as a regular activity."""

CONVERSATION_ID_PATCH = "conversation-id-search-attribute"
"""The conversation carries the ``ConversationId`` search attribute, as its turns do, so a
``ConversationId="…"`` filter lists the conversation with its turns (runs recorded before
it never set it)."""


@workflow.defn(name=CONVERSATION_WORKFLOW)
class ConversationWorkflow:
    @workflow.init
    def __init__(self, input: ConversationInput | None = None) -> None:
        inp = input or ConversationInput()
        self._settings = ConversationSettings(
            model=inp.model,
            max_steps=inp.max_steps,
            message_concurrency=inp.message_concurrency,
            debounce_ms=inp.debounce_ms,
        )
        self._worker_concurrency = inp.worker_concurrency
        """The worker's default (``TURNS_MESSAGE_CONCURRENCY``) as the first run read it."""
        self._worker_debounce_ms = inp.worker_debounce_ms
        self._arrivals = 0
        """Turn requests queued so far in this run (``debounce`` waits until it stops moving)."""
        self._last_arrival: datetime | None = None
        self._turn_count = inp.turn_count
        self._queue: deque[PendingRequest] = deque(inp.queue)
        self._queued_bytes = sum(p.size for p in inp.queue)
        """What the queue holds, as stored (``PendingRequest.size``, its JSON)."""
        self._records: dict[str, RequestRecord] = {r.request_id: r for r in inp.recent}
        self._done: deque[str] = deque(r.request_id for r in inp.recent)
        """Finished request ids, oldest first: trimming is O(1) per request."""
        for p in inp.queue:
            self._records[p.request_id] = RequestRecord(request_id=p.request_id, kind=p.kind)  # type: ignore[arg-type]
        self._results: dict[str, TurnResult] = {r.request_id: r for r in inp.results}
        self._rejected: deque[RequestRecord] = deque(inp.rejected, maxlen=RECENT_REJECTED)
        self._rejected_count = inp.rejected_count
        self._logged_rejections = 0
        self._waiting_for: str | None = None
        self._handing_over = False
        self._id_problem = id_problem(workflow.info().workflow_id)
        self._last_result = inp.last_result
        self._last_body = inp.last_body
        self._last_model = inp.last_model
        self._last_metadata = inp.last_metadata
        self._usage = inp.usage
        self._cost = inp.cost_usd
        self._running: PendingRequest | None = None
        self._running_turn: workflow.ChildWorkflowHandle[Any, TurnResult] | None = None
        self._responses: set[asyncio.Task[Any]] = set()
        """Work that runs beside the loop (on_chat_response, forwarding tool results): a
        hand-over waits for it."""
        self._tool_results: deque[tuple[Any, int]] = deque()
        """Tool results for the running turn, waiting to be forwarded, with their sizes."""
        self._tool_result_bytes = 0
        self._forwarder: asyncio.Task[None] | None = None
        self._inbox = Inbox(self._take)
        self.foldable_signals: frozenset[str] | None = None
        """What the worker's runner may fold into one job (``intake.FOLDABLE_SIGNALS``): the
        four signals once this run takes them through the inbox, none in a run recorded
        before it, None until the first signal tells."""

    # --- the loop -------------------------------------------------------------------------

    FOLDABLE_LIVE = INBOX_SIGNALS
    """What the runner may fold before the run knows (``intake.FOLDABLE_LIVE``)."""

    @workflow.run
    async def run(self, input: ConversationInput | None = None) -> None:
        patches.decide()  # first: before any local activity (see ``patches``)
        conversation_id = workflow.info().workflow_id
        if self._id_problem:
            # Not a conversation id (too long, control characters, or a turn's id pattern):
            # nothing was queued (every request was rejected), and the starter learns why.
            workflow.set_current_details(f"**invalid conversation id**: {self._id_problem}")
            raise ApplicationError(
                f"invalid conversation id: {self._id_problem}", type=INVALID_ID, non_retryable=True
            )
        if (
            patches.patched(CONVERSATION_ID_PATCH)
            and workflow.info().typed_search_attributes.get(CONVERSATION_ID) != conversation_id
        ):  # set once; a continue-as-new carries it over
            workflow.upsert_search_attributes([CONVERSATION_ID.value_set(conversation_id)])
        if self._turn_count is None:
            # The store may be down: the activity retries until it answers (no attempt limit).
            self._waiting_for = "store"
            workflow.set_current_details(
                "opening the conversation: **waiting for the store** (retrying until it answers)"
            )
            if patches.patched(LOCAL_OPEN_PATCH) and patches.patched(PATCH_WORKER_DEFAULTS):
                # a local activity: no round trip to the server before the first turn starts
                opened = await workflow.execute_local_activity(
                    OPEN_CONVERSATION_WITH_DEFAULTS,
                    conversation_id,
                    result_type=ConversationOpened,
                    start_to_close_timeout=options.SHORT,
                    retry_policy=options.BOOKKEEPING_RETRY,
                    summary="open conversation",
                )
                self._turn_count = opened.turn_count
                self._worker_concurrency = opened.message_concurrency
                self._worker_debounce_ms = opened.debounce_ms
            elif patches.patched(LOCAL_OPEN_PATCH):
                self._turn_count = await workflow.execute_local_activity(
                    OPEN_CONVERSATION,
                    conversation_id,
                    result_type=int,
                    start_to_close_timeout=options.SHORT,
                    retry_policy=options.BOOKKEEPING_RETRY,
                    summary="open conversation",
                )
            else:
                self._turn_count = await workflow.execute_activity(
                    OPEN_CONVERSATION,
                    conversation_id,
                    result_type=int,
                    start_to_close_timeout=options.SHORT,
                    heartbeat_timeout=options.BEGIN_HEARTBEAT,
                    retry_policy=options.BOOKKEEPING_RETRY,
                    summary="open conversation",
                )
            self._waiting_for = None
            workflow.set_current_details(f"open · {self._turn_count} turn(s) so far")
        while True:
            await workflow.wait_condition(
                lambda: bool(self._queue) or workflow.info().is_continue_as_new_suggested()
            )
            if (
                self._queue
                and workflow.info().is_continue_as_new_suggested()
                and patches.patched(PATCH_HANDOVER_WITH_QUEUE)
            ):
                # History is long and requests are waiting: hand them over to a new run
                # (what is carried is bounded by MAX_QUEUED_BYTES, whatever is queued).
                # Updates still waiting are told to retry there (HANDED_OVER).
                self._handing_over = True
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished() and not self._responses
                )
                break
            if self._queue:
                await self._next_turn(conversation_id)
                continue
            # History is long and nothing is queued: hand over to a new run once every
            # handler is done. A request that arrives meanwhile is run first (an update
            # waiting for its turn would otherwise never finish).
            await workflow.wait_condition(
                lambda: (
                    bool(self._queue) or (workflow.all_handlers_finished() and not self._responses)
                )
            )
            if not self._queue:
                break
        workflow.continue_as_new(self._carry())

    async def _next_turn(self, conversation_id: str) -> None:
        head = self._queue[0]
        if head.kind == "submit" and self._concurrency(head) == "debounce":
            await self._quiet(self._debounce_ms(head))
            if not self._queue or self._queue[0] is not head:
                return  # cancelled, or handed over, while it waited: the loop looks again
        request = self._queue.popleft()
        self._queued_bytes -= request.size
        if request.kind == "add":
            await self._add(conversation_id, request)
            return
        if request.kind == "submit" and self._concurrency(request) in MERGING:
            self._merge_waiting(request)
        result = await self._run_turn(conversation_id, request)
        self._complete(request, result)
        if result.auto_continue:  # client tool results arrived: continue before anything else
            follow = PendingRequest(
                request_id=str(workflow.uuid4()),
                kind="continue",
                body=request.body,
                model=request.model,
                metadata=request.metadata,
            )
            if patches.patched(PATCH_STORED_SIZES):
                _sized(follow)
            self._queue.appendleft(follow)
            self._queued_bytes += follow.size
            self._records[follow.request_id] = RequestRecord(
                request_id=follow.request_id, kind="continue"
            )
        if result.status != "skipped" and result.respond:
            task = asyncio.create_task(self._respond(result))
            self._responses.add(task)
            task.add_done_callback(self._responses.discard)

    async def _run_turn(self, conversation_id: str, request: PendingRequest) -> TurnResult:
        assert self._turn_count is not None
        self._turn_count += 1
        number = self._turn_count
        record = self._records[request.request_id]
        self._running = request
        continuation = request.kind == "continue"
        model = request.model or self._settings.model
        workflow.set_current_details(f"running turn {number} (request `{request.request_id}`)")
        workflow_id = turn_workflow_id(conversation_id, number)
        try:
            for attempt in range(TURN_START_ATTEMPTS):
                try:
                    self._running_turn = await self._start_turn(
                        conversation_id, request, number, model, continuation, workflow_id
                    )
                    break
                except FailureError as err:
                    # The id is taken (something a client started under a turn's id) or the
                    # start failed otherwise: never fail the conversation over it. Retry
                    # under a random, still readable suffix, then record a typed error.
                    workflow.logger.warning("turn %s could not start: %s", workflow_id, err)
                    if attempt == TURN_START_ATTEMPTS - 1:
                        return TurnResult(
                            request_id=request.request_id,
                            conversation_id=conversation_id,
                            turn_number=number,
                            workflow_id="",
                            status="error",
                            continuation=continuation,
                            error=ErrorInfo(
                                type=TURN_START_FAILED,
                                message=f"could not start turn {number}: {err}",
                                stage="turn",
                            ),
                            metadata=request.metadata,
                        )
                    suffix = str(workflow.uuid4()).replace("-", "")[:8]
                    workflow_id = f"{turn_workflow_id(conversation_id, number)}~{suffix}"
            # only now does the turn exist for clients that look it up by number
            record.status, record.turn_number = "running", number
            record.workflow_id = workflow_id
            assert self._running_turn is not None
            return await self._running_turn
        except ChildWorkflowError as err:
            cause = err.cause or err
            return TurnResult(
                request_id=request.request_id,
                conversation_id=conversation_id,
                turn_number=number,
                workflow_id=workflow_id,
                status="error",
                continuation=continuation,
                error=ErrorInfo(type=type(cause).__name__, message=str(cause), stage="turn"),
                metadata=request.metadata,
            )
        finally:
            self._running = None
            self._running_turn = None

    async def _start_turn(
        self,
        conversation_id: str,
        request: PendingRequest,
        number: int,
        model: str | None,
        continuation: bool,
        workflow_id: str,
    ) -> workflow.ChildWorkflowHandle[Any, TurnResult]:
        return await workflow.start_child_workflow(
            TURN_WORKFLOW,
            TurnInput(
                conversation_id=conversation_id,
                turn_number=number,
                request_id=request.request_id,
                new_messages=request.messages,
                continuation=continuation,
                body=request.body,
                model=model,
                max_steps=self._settings.max_steps,
                regenerate=request.regenerate,
                metadata=request.metadata,
            ),
            id=workflow_id,
            result_type=TurnResult,
            static_summary=_summary(number, conversation_id, model, request.kind),
            static_details=_details(request),
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(CONVERSATION_ID, conversation_id),
                    SearchAttributePair(TURN_STATUS, "running"),
                ]
            ),
        )

    def _complete(self, request: PendingRequest, result: TurnResult) -> None:
        record = self._records[request.request_id]
        record.status = result.status
        record.error = result.error
        self._finish(request.request_id, result)
        for merged in request.merged:  # answered by this turn too
            other = self._records.get(merged)
            if other is not None:
                other.status, other.error = result.status, result.error
                other.turn_number, other.workflow_id = record.turn_number, record.workflow_id
            self._finish(merged, result.model_copy(update={"request_id": merged}))
        self._last_result = result
        self._usage = self._usage + result.usage
        if result.cost_usd is not None:
            self._cost = (self._cost or 0.0) + result.cost_usd
        workflow.set_current_details(
            f"turn {result.turn_number}: **{result.status}**"
            + (f" — {result.error.message}" if result.error else "")
            + self._notes()
        )

    def _finish(self, request_id: str, result: TurnResult) -> None:
        self._results[request_id] = result
        while len(self._results) > RECENT:
            self._results.pop(next(iter(self._results)))
        self._done.append(request_id)
        while len(self._done) > RECENT:
            old = self._done.popleft()
            known = self._records.get(old)
            if known is not None and known.status not in ("queued", "running"):
                del self._records[old]

    async def _respond(self, result: TurnResult) -> None:
        """on_chat_response runs after the turn lock is released: it may submit a follow-up."""
        await options.chat_response(result, f"on_chat_response · turn {result.turn_number}")

    # --- requests ---------------------------------------------------------------------------
    # Handlers take the raw payload (workflows.intake): the SDK would otherwise drop what it
    # cannot decode, silently. Every rejection is cheap and typed; nothing raises here except
    # an ApplicationError that fails one update, never the workflow task.

    @workflow.signal(name=SIGNAL_SUBMIT)
    def submit_messages(self, raw: RawValue = ABSENT) -> None:
        """New messages; a malformed request is recorded as rejected, never dropped silently."""
        self._receive(SIGNAL_SUBMIT, raw)

    def _receive(self, kind: str, raw: RawValue) -> None:
        """A signal as it arrives: into the inbox (O(1), nothing parsed), or, in runs recorded
        before the inbox, taken at once."""
        if not self._through_inbox():
            self._take(kind, raw)
            return
        limit, what = (
            (MAX_TOOL_RESULT_BYTES, "tool result")
            if kind == SIGNAL_TOOL_RESULT
            else (MAX_REQUEST_BYTES, "request")
        )
        try:
            drain = self._inbox.offer(kind, raw, limit, what)
        except Rejected as e:
            self._reject(None, e.type, e.message)
            return
        if drain is not None:
            self._responses.add(drain)
            drain.add_done_callback(self._responses.discard)

    @workflow.signal(dynamic=True)
    def any_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """A burst the worker's runner folded into one job (``durable_turns.signal_fold``):
        each payload goes into the inbox as its own signal would have; or a signal of a name the
        conversation does not take, recorded as rejected (``UnknownSignal``) rather than kept
        waiting for a handler that never comes."""
        kind = unfold(name)
        if kind is not None and kind in INBOX_SIGNALS:
            for raw in args:
                self._receive(kind, raw)
            return
        shown = name[:100] + ("…" if len(name) > 100 else "")
        self._reject(
            None,
            UNKNOWN_SIGNAL,
            f"no signal named {shown!r}: a conversation takes {', '.join(sorted(INBOX_SIGNALS))}",
        )

    def _through_inbox(self) -> bool:
        """Whether this run takes signals through the inbox (``PATCH_INBOX``), and so whether
        the worker's runner may fold them (one workflow.patched answer for the whole run)."""
        through = patches.patched(PATCH_INBOX)
        self.foldable_signals = INBOX_SIGNALS if through else frozenset()
        return through

    def _take(self, kind: str, raw: RawValue) -> None:
        """Parse and act on one signal (what its handler did before the inbox)."""
        if kind == SIGNAL_SUBMIT:
            self._take_submit(raw)
        elif kind == SIGNAL_CONTINUE:
            self._take_continue(raw)
        elif kind == SIGNAL_CANCEL:
            self._take_cancel(raw)
        elif kind == SIGNAL_ADD:
            self._take_add(raw)
        else:
            self._take_tool_result(raw)

    def _take_submit(self, raw: RawValue) -> None:
        value: Any = None
        try:
            value = decode(raw, MAX_REQUEST_BYTES)
            self._enqueue(_gate_metadata(self._parse_submit(value)), payload_size(raw))
        except Rejected as e:
            self._reject(value, e.type, e.message)

    @workflow.update(name=UPDATE_SEND)
    async def send_message(self, raw: RawValue = ABSENT) -> TurnResult:
        """Submit messages and wait for the turn's result.

        Retried with a request id it knows, it waits for (or returns) that request's result;
        a result no longer held is a ``RequestExpired`` error, never a wait without end.
        """
        request_id = await self._admit(raw)
        known = self._records[request_id]
        if request_id not in self._results and known.status not in ("queued", "running"):
            raise ApplicationError(
                f"request {request_id!r} finished ({known.status}) in an earlier run of the"
                " conversation and its result is no longer held; read it from the turn"
                f" workflow {known.workflow_id or '(none)'} or the transcript",
                type=REQUEST_EXPIRED,
                non_retryable=True,
            )
        await workflow.wait_condition(lambda: request_id in self._results or self._handing_over)
        if request_id in self._results:
            return self._results[request_id]
        raise _handed_over(request_id)

    @workflow.update(name=UPDATE_START)
    async def start_turn(self, raw: RawValue = ABSENT) -> RequestRecord:
        """Submit messages and return as soon as their turn has started: its number and
        workflow id, so a client follows the turn's live stream and waits for its result
        without polling. A request that ends without a turn (cancelled) comes back with
        its final status; retried with a known request id, it answers for that request."""
        request_id = await self._admit(raw)
        record = self._records[request_id]
        await workflow.wait_condition(
            lambda: (
                record.turn_number is not None
                or record.status not in ("queued", "running")
                or self._handing_over
            )
        )
        if record.turn_number is None and record.status in ("queued", "running"):
            raise _handed_over(request_id)
        return record.model_copy()

    async def _admit(self, raw: RawValue) -> str:
        """Queue a request (or find the one its request id names), after the signals that
        came before it; its request id."""
        if self._inbox.taken < self._inbox.received:  # only ever with PATCH_INBOX
            ticket = self._inbox.received
            await workflow.wait_condition(lambda: self._inbox.taken >= ticket)
        try:
            request = _gate_metadata(self._parse_submit(decode(raw, MAX_REQUEST_BYTES)))
            request_id = request.request_id or ""
            if request_id not in self._records:
                request_id = self._enqueue(request, payload_size(raw))
        except Rejected as e:
            raise _failure(e) from None
        return request_id

    @send_message.validator
    def _validate_send(self, raw: RawValue = ABSENT) -> None:
        try:
            if self._id_problem:
                raise Rejected(INVALID_ID, f"invalid conversation id: {self._id_problem}")
            request = self._parse_submit(decode(raw, MAX_REQUEST_BYTES))
            if request.request_id is None or request.request_id not in self._records:
                # what the handler will keep, measured as it will (nothing is kept here;
                # validators never run on replay, so the newest rules apply)
                pending = self._pending(
                    request.messages,
                    request.request_id or "-" * 36,
                    body=request.body,
                    model=request.model,
                    metadata=request.metadata,
                )
                self._check_room(pending.size)
        except Rejected as e:
            raise _failure(e) from None

    @start_turn.validator
    def _validate_start(self, raw: RawValue = ABSENT) -> None:
        self._validate_send(raw)

    @workflow.signal(name=SIGNAL_ADD)
    def add_messages(self, raw: RawValue = ABSENT) -> None:
        """Messages for the transcript without a turn (Think's ``addMessages()``), queued
        with the turns; a malformed request is recorded as rejected."""
        self._receive(SIGNAL_ADD, raw)

    def _take_add(self, raw: RawValue) -> None:
        value: Any = None
        try:
            value = decode(raw, MAX_REQUEST_BYTES)
            req = _validated(AddMessages, value)
            if self._id_problem:
                raise Rejected(INVALID_ID, f"invalid conversation id: {self._id_problem}")
            request_id = req.request_id or req.derived_request_id() or str(workflow.uuid4())
            if request_id in self._records:
                return  # idempotent: accepted once
            pending = self._pending(req.messages, request_id, kind="add")
            self._check_room(pending.size)
        except Rejected as e:
            self._reject(value, e.type, e.message)
            return
        self._queue.append(pending)
        self._queued_bytes += pending.size
        self._records[request_id] = RequestRecord(request_id=request_id, kind="add")

    async def _add(self, conversation_id: str, request: PendingRequest) -> None:
        """An ``addMessages`` request's turn in the queue: its messages into the store."""
        record = self._records[request.request_id]
        record.status = "running"
        self._running = request
        n = len(request.messages)
        workflow.set_current_details(f"adding {n} message(s) (request `{request.request_id}`)")
        try:
            # The store may be down: retried until it answers (the messages were validated
            # and sized here, so no retry is caused by their content).
            await workflow.execute_activity(
                ADD_MESSAGES,
                args=[conversation_id, request.messages],
                start_to_close_timeout=options.SHORT,
                retry_policy=options.BOOKKEEPING_RETRY,
                summary=f"add {n} message(s)",
            )
        finally:
            self._running = None
        record.status = "completed"
        self._finish(
            request.request_id,
            TurnResult(
                request_id=request.request_id,
                conversation_id=conversation_id,
                turn_number=0,
                workflow_id="",
                status="completed",
            ),
        )
        workflow.set_current_details(f"added {n} message(s)" + self._notes())

    @workflow.signal(name=SIGNAL_CONTINUE)
    def continue_last_turn(self, raw: RawValue = ABSENT) -> None:
        """Continue the last assistant message (skipped when there is none).

        The continuation runs with the last request's model, and its body unless one is given.
        """
        self._receive(SIGNAL_CONTINUE, raw)

    def _take_continue(self, raw: RawValue) -> None:
        value: Any = None
        try:
            value = decode(raw, MAX_REQUEST_BYTES)
            req = _validated(ContinueLastTurn, value or {})
            _gate_metadata(req)
            request_id = req.request_id or str(workflow.uuid4())
            if request_id in self._records:
                return
            body = req.body if req.body is not None else self._last_body
            metadata = req.metadata if req.metadata is not None else self._last_metadata
            pending = PendingRequest(
                request_id=request_id,
                kind="continue",
                body=body,
                model=self._last_model,
                metadata=metadata,
            )
            if patches.patched(PATCH_STORED_SIZES):
                _sized(pending)
            else:
                pending.size = payload_size(raw)
            self._check_room(pending.size)
        except Rejected as e:
            self._reject(value, e.type, e.message)
            return
        self._queue.append(pending)
        self._queued_bytes += pending.size
        self._records[request_id] = RequestRecord(request_id=request_id, kind="continue")

    @workflow.signal(name=SIGNAL_CANCEL)
    def cancel_chat(self, raw: RawValue = ABSENT) -> None:
        """Cancel a queued request (it never runs) or the running turn (it ends "aborted")."""
        self._receive(SIGNAL_CANCEL, raw)

    def _take_cancel(self, raw: RawValue) -> None:
        value: Any = None
        try:
            value = decode(raw, MAX_REQUEST_BYTES)
            req = CancelChat.model_validate(value or {})
        except Rejected as e:
            self._reject(value, e.type, e.message)
            return
        except ValidationError as e:
            self._reject(value, INVALID_REQUEST, _explain(e))
            return
        target = req.request_id
        for pending in list(self._queue):
            if target is None or pending.request_id == target:
                if target is None:
                    break  # no id: cancel the running turn only
                self._queue.remove(pending)
                self._queued_bytes -= pending.size
                record = self._records[pending.request_id]
                record.status = "aborted"
                self._finish(
                    pending.request_id,
                    TurnResult(
                        request_id=pending.request_id,
                        conversation_id=workflow.info().workflow_id,
                        turn_number=0,
                        workflow_id="",
                        status="aborted",
                        continuation=pending.kind == "continue",
                        metadata=pending.metadata,
                    ),
                )
                return
        running = self._running
        if self._running_turn is not None and running and target in (None, running.request_id):
            self._running_turn.cancel()

    @workflow.signal(name=SIGNAL_TOOL_RESULT)
    async def submit_tool_result(self, raw: RawValue = ABSENT) -> None:
        """A client tool's result or an approval, for the turn that waits on it.

        Forwarded one signal per workflow task: each is up to MAX_TOOL_RESULT_BYTES, and a
        burst forwarded at once (one command each, in one task's completion) went past gRPC's
        4 MiB message limit, and Temporal terminates a workflow whose task cannot be sent."""
        if self._through_inbox():
            self._receive(SIGNAL_TOOL_RESULT, raw)
            return
        # as runs recorded before the inbox did it, in this order
        value = self._tool_result_value(raw)
        if value is _REJECTED or self._running_turn is None:
            return
        if not patches.patched(PATCH_FORWARD_ONE_AT_A_TIME):
            await self._running_turn.signal(TURN_SIGNAL_TOOL_RESULT, value)
            return
        self._queue_tool_result(value)

    def _take_tool_result(self, raw: RawValue) -> None:
        value = self._tool_result_value(raw)
        if value is not _REJECTED:
            self._queue_tool_result(value)

    def _tool_result_value(self, raw: RawValue) -> Any:
        """The tool result's JSON value, or ``_REJECTED`` (recorded) when it is malformed or
        no turn is running to take it."""
        try:
            value = decode(raw, MAX_TOOL_RESULT_BYTES, "tool result")
        except Rejected as e:
            self._reject(None, e.type, e.message)
            return _REJECTED
        if self._running_turn is None:
            self._reject(value, INVALID_REQUEST, "no turn is running, so no tool call is waiting")
            return _REJECTED
        return value

    def _queue_tool_result(self, value: Any) -> None:
        size = len(to_json(value))  # as it will be forwarded (re-encoding can grow it)
        if size > MAX_TOOL_RESULT_BYTES:
            self._reject(
                None,
                REQUEST_TOO_LARGE,
                f"tool result is {size} bytes as forwarded; the limit is {MAX_TOOL_RESULT_BYTES}",
            )
            return
        if self._tool_result_bytes + size > MAX_PENDING_TOOL_RESULT_BYTES:
            self._reject(
                value,
                QUEUE_FULL,
                f"{self._tool_result_bytes} bytes of tool results are waiting to reach the"
                f" turn (limit {MAX_PENDING_TOOL_RESULT_BYTES}): retry in a moment",
            )
            return
        self._tool_results.append((value, size))
        self._tool_result_bytes += size
        if self._forwarder is None:
            self._forwarder = asyncio.create_task(self._forward_tool_results())
            self._responses.add(self._forwarder)
            self._forwarder.add_done_callback(self._responses.discard)

    async def _forward_tool_results(self) -> None:
        """One tool result at a time to the running turn; what is left when it ends is
        dropped (no call waits for it any more)."""
        try:
            while self._tool_results:
                value, size = self._tool_results.popleft()
                self._tool_result_bytes -= size
                turn = self._running_turn
                if turn is None:
                    continue
                try:
                    await turn.signal(TURN_SIGNAL_TOOL_RESULT, value)
                except Exception as err:  # the turn ended meanwhile: nothing waits for it
                    workflow.logger.info("tool result not forwarded: %s", err)
        finally:
            self._forwarder = None

    @workflow.query(name=QUERY_STATE)
    def state(self) -> ConversationState:
        running = self._records.get(self._running.request_id) if self._running else None
        return ConversationState(
            conversation_id=workflow.info().workflow_id,
            turn_count=self._turn_count or 0,
            running=running,
            queue=[self._records[p.request_id] for p in self._queue],
            recent=[*self._finished(), *self._rejected],
            last_result=self._last_result,
            usage=self._usage,
            cost_usd=self._cost,
            queued_count=len(self._queue),
            rejected_count=self._rejected_count,
            waiting_for=self._waiting_for or ("queue_full" if self._full() else None),
            message_concurrency=(
                self._settings.message_concurrency or self._worker_concurrency or "queue"
            ),
        )

    # --- helpers ----------------------------------------------------------------------------

    def _parse_submit(self, value: Any) -> SubmitMessages:
        if self._id_problem:
            raise Rejected(INVALID_ID, f"invalid conversation id: {self._id_problem}")
        return _validated(SubmitMessages, value)

    def _concurrency(self, request: PendingRequest | SubmitMessages) -> str:
        """What ``request`` does while a turn runs or waits: its own setting, the
        conversation's, the worker's, else ``queue``."""
        own = (
            request.concurrency
            if isinstance(request, PendingRequest)
            else request.message_concurrency
        )
        return own or self._settings.message_concurrency or self._worker_concurrency or "queue"

    def _debounce_ms(self, request: PendingRequest) -> int:
        for value in (request.debounce_ms, self._settings.debounce_ms, self._worker_debounce_ms):
            if value is not None:
                return value
        return DEFAULT_DEBOUNCE_MS

    async def _quiet(self, ms: int) -> None:
        """Until no turn request has come for ``ms`` (``debounce``); a timer per wait."""
        while self._last_arrival is not None:
            quiet = (workflow.now() - self._last_arrival).total_seconds() * 1000
            if quiet >= ms:
                return
            workflow.set_current_details(f"debounce: waiting for {ms} ms without a new message")
            try:
                await workflow.wait_condition(
                    functools.partial(self._moved_since, self._arrivals),
                    timeout=timedelta(milliseconds=ms - quiet),
                )
            except TimeoutError:
                pass
            if self._handing_over:
                return

    def _moved_since(self, arrivals: int) -> bool:
        """A turn request came since ``arrivals``, or the run hands over."""
        return self._arrivals != arrivals or self._handing_over

    def _merge_waiting(self, request: PendingRequest) -> None:
        """Fold the turn requests waiting right behind ``request`` that merge too into it, in
        order (their messages after its own; the newest body, model and metadata win), as far as the
        stored request bound allows; they finish with its turn."""
        while self._queue:
            nxt = self._queue[0]
            if nxt.kind != "submit" or self._concurrency(nxt) not in MERGING:
                return
            if request.size + nxt.size > MAX_STORED_REQUEST_BYTES:
                return
            self._queue.popleft()
            self._queued_bytes -= nxt.size
            request.messages = [*request.messages, *nxt.messages]
            request.body, request.model = nxt.body or request.body, nxt.model or request.model
            request.metadata = nxt.metadata or request.metadata
            request.merged = [*request.merged, nxt.request_id, *nxt.merged]
            request.size += nxt.size
            record = self._records.get(nxt.request_id)
            if record is not None:
                record.status = "running"
                record.merged_into = request.request_id

    def _busy(self) -> bool:
        """A turn runs or waits (what ``drop`` refuses and ``latest`` interrupts)."""
        return self._running is not None or any(p.kind != "add" for p in self._queue)

    def _full(self, size: int = 0) -> bool:
        return (
            len(self._queue) >= MAX_QUEUED_REQUESTS or self._queued_bytes + size > MAX_QUEUED_BYTES
        )

    def _check_room(self, size: int) -> None:
        """Admission control: past the bound, a typed ``QueueFull``, never silent loss."""
        if self._full(size):
            raise Rejected(
                QUEUE_FULL,
                f"the conversation's queue is full ({len(self._queue)} requests,"
                f" {self._queued_bytes} bytes; limits {MAX_QUEUED_REQUESTS} requests,"
                f" {MAX_QUEUED_BYTES} bytes): retry once it drains",
            )

    def _pending(
        self,
        given: list[Message],
        request_id: str,
        size: int = 0,
        measure: bool = True,
        **fields: Any,
    ) -> PendingRequest:
        """The request of messages ``given`` (and ``fields``) as the conversation keeps it,
        sized as kept (``measure``; else ``size``, as it came); raises Rejected."""
        # Message ids are scoped to their request: a client-chosen id can neither collide
        # with another request's messages nor with the engine's own (turn-derived) ids.
        messages = [
            m.model_copy(update={"id": f"{request_id}/{m.id or i}"}) for i, m in enumerate(given)
        ]
        if len({m.id for m in messages}) != len(messages):
            raise Rejected(
                MESSAGE_ID_CONFLICT, "two messages of the request would have the same id"
            )
        pending = PendingRequest(request_id=request_id, messages=messages, size=size, **fields)
        if not measure:
            return pending
        _sized(pending)
        if pending.size > MAX_STORED_REQUEST_BYTES:
            raise Rejected(
                REQUEST_TOO_LARGE,
                f"request is {pending.size} bytes as the conversation keeps it ({len(messages)}"
                " message(s), each with its id scoped to the request); the limit is"
                f" {MAX_STORED_REQUEST_BYTES} bytes. Send fewer, larger messages, or large"
                " content by reference.",
            )
        return pending

    def _enqueue(self, req: SubmitMessages, size: int) -> str:
        """Queue ``req`` (``size``: its payload's bytes); its request id."""
        if req.request_id is not None and req.request_id in self._records:
            return req.request_id  # idempotent: the same request id is accepted once
        if req.regenerate is not None:
            self._check_room(size)
            return self._enqueue_regenerate(req, req.request_id or str(workflow.uuid4()), size)
        concurrency = self._concurrency(req)
        if concurrency == "drop" and self._busy():
            raise Rejected(
                CONVERSATION_BUSY,
                "a turn is running or waiting and this conversation's message concurrency is"
                " 'drop': send it again once the conversation is idle",
            )
        if patches.patched(PATCH_STORED_SIZES):
            request_id = req.request_id or str(workflow.uuid4())
            pending = self._pending(
                req.messages, request_id, body=req.body, model=req.model, metadata=req.metadata
            )
            self._check_room(pending.size)
        else:  # exactly as runs recorded before did it (their random ids come in this order)
            self._check_room(size)
            request_id = req.request_id or str(workflow.uuid4())
            pending = self._pending(
                req.messages,
                request_id,
                size,
                measure=False,
                body=req.body,
                model=req.model,
                metadata=req.metadata,
            )
        pending.concurrency, pending.debounce_ms = req.message_concurrency, req.debounce_ms
        self._queue.append(pending)
        self._queued_bytes += pending.size
        self._records[request_id] = RequestRecord(request_id=request_id)
        self._last_body = req.body
        self._last_model = req.model
        self._last_metadata = req.metadata
        self._arrivals += 1
        self._last_arrival = workflow.now()
        if concurrency == "latest":
            self._interrupt()
        return request_id

    def _interrupt(self) -> None:
        """``latest``: cancel the running turn as ``cancelChat`` does (it ends ``aborted``
        with what it streamed); the messages waiting are answered next, in one turn."""
        if self._running_turn is not None and self._running is not None:
            self._running_turn.cancel()

    def _enqueue_regenerate(self, req: SubmitMessages, request_id: str, size: int) -> str:
        """A regeneration: no new messages; the marking is ``begin_turn``'s. Without a
        ``body`` or ``model``, the last request's (as ``continueLastTurn``)."""
        given = req.model_fields_set
        body = req.body if "body" in given else self._last_body
        model = req.model if "model" in given else self._last_model
        metadata = req.metadata if "metadata" in given else self._last_metadata
        self._queue.append(
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
        self._queued_bytes += size
        self._records[request_id] = RequestRecord(request_id=request_id, kind="regenerate")
        self._last_body = body
        self._last_model = model
        self._last_metadata = metadata
        return request_id

    def _reject(self, value: Any, error_type: str, message: str) -> None:
        """Record a rejection: O(1), bounded memory, aggregated logging (bursts stay cheap)."""
        self._rejected_count += 1
        given = value.get("request_id") if isinstance(value, dict) else None
        request_id = (
            given
            if isinstance(given, str) and given not in self._records and id_problem(given) is None
            else f"rejected-{self._rejected_count}"
        )
        error = ErrorInfo(type=error_type, message=message, stage="parse")
        self._rejected.append(RequestRecord(request_id=request_id, status="rejected", error=error))
        if self._logged_rejections < LOGGED_REJECTIONS:
            self._logged_rejections += 1
            workflow.logger.warning("rejected request %s: %s", request_id, message)
        elif self._rejected_count % 1000 == 0:
            workflow.logger.warning("%d requests rejected so far", self._rejected_count)
        workflow.set_current_details(
            f"**rejected request** `{request_id}` ({error_type}): {message}" + self._notes()
        )

    def _notes(self) -> str:
        notes = []
        if self._rejected_count:
            notes.append(f"{self._rejected_count} request(s) rejected so far")
        if self._full():
            notes.append(
                f"**queue full** ({len(self._queue)} requests, {self._queued_bytes} bytes):"
                " new requests are rejected with QueueFull until it drains"
            )
        return "".join(f"\n\n{n}" for n in notes)

    def _finished(self) -> list[RequestRecord]:
        return [r for k in self._done if (r := self._records.get(k)) is not None]

    def _carry(self) -> ConversationInput:
        # Bounded whatever was queued or answered: the queue by MAX_QUEUED_BYTES, results by
        # MAX_CARRIED_RESULT_BYTES (newest first), records by RECENT; and the whole is
        # measured as it is sent, and cut to MAX_CARRIED_BYTES (_fit).
        results: list[TurnResult] = []
        budget = MAX_CARRIED_RESULT_BYTES
        for result in reversed(list(self._results.values())):
            size = len(result.model_dump_json())
            if size > budget:
                continue  # too large to carry: a retry gets RequestExpired
            budget -= size
            results.append(result)
        last = self._last_result
        if last is not None and len(last.text) > 4096:
            last = last.model_copy(update={"text": last.text[:4096] + "…"})
        return _fit(
            ConversationInput(
                model=self._settings.model,
                max_steps=self._settings.max_steps,
                turn_count=self._turn_count,
                queue=list(self._queue),
                recent=self._finished(),
                last_result=last,
                last_body=self._last_body,
                last_model=self._last_model,
                last_metadata=self._last_metadata,
                usage=self._usage,
                cost_usd=self._cost,
                results=results[::-1],
                rejected=list(self._rejected),
                rejected_count=self._rejected_count,
                message_concurrency=self._settings.message_concurrency,
                debounce_ms=self._settings.debounce_ms,
                worker_concurrency=self._worker_concurrency,
                worker_debounce_ms=self._worker_debounce_ms,
            )
        )


R = TypeVar("R", SubmitMessages, ContinueLastTurn)


def _gate_metadata(request: R) -> R:
    """``request``, unless it gives ``metadata`` in a run recorded before requests could:
    that run rejected the field as unknown, and its replay rejects it again (a handler, never a
    validator: ``patched`` records a marker)."""
    if "metadata" in request.model_fields_set and not patches.patched(PATCH_METADATA):
        raise Rejected(
            INVALID_REQUEST, "malformed request: metadata: Extra inputs are not permitted"
        )
    return request


def _sized(pending: PendingRequest) -> PendingRequest:
    """``pending`` with its ``size``: its JSON as it will be sent (the turn's input, and what
    continue-as-new carries of it)."""
    pending.size = len(to_json(pending))
    return pending


def _fit(carry: ConversationInput) -> ConversationInput:
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


def _handed_over(request_id: str) -> ApplicationError:
    return ApplicationError(
        f"the conversation continued as new with request {request_id!r} still queued:"
        " send the same request again (same request id) to wait for it",
        type=HANDED_OVER,
    )


def _explain(error: ValidationError) -> str:
    return f"malformed request: {validation_problems(error, limit=5)}"


Request = TypeVar("Request", SubmitMessages, ContinueLastTurn, AddMessages)


def _validated(model: type[Request], value: Any) -> Request:
    """``value`` as the request ``model``, or a ``Rejected`` (InvalidRequest) saying why not."""
    try:
        return model.model_validate(value)
    except ValidationError as e:
        raise Rejected(INVALID_REQUEST, _explain(e)) from None


def _summary(number: int, conversation_id: str, model: str | None, request_kind: str) -> str:
    kind = {"continue": "continuation", "regenerate": "regeneration"}.get(request_kind, "turn")
    text = f"{kind} {number} · conv {conversation_id}" + (f" · {model}" if model else "")
    return text[:200]


def _details(request: PendingRequest) -> str:
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
