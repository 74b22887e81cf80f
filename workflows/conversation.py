"""``ConversationWorkflow``: one per conversation id; the turn lock and the request queue.

A thin shell around :class:`~durable_turns.workflows.conversation_machine.Conversation`,
which makes every decision (intake, the queue and its message concurrencies, rejections,
what runs next, what continue-as-new carries) without the SDK. This module feeds it what
happens (a signal or update received, a turn finished or failed, a timer fired, the history
grown long) and carries out what it answers: each turn as a child ``TurnWorkflow``, one at a
time, so turns of one conversation never overlap; ``addMessages`` as an activity; a cancel;
tool results forwarded; continue-as-new. Signals take raw JSON and are decoded here, because
a signal whose argument fails to decode is silently dropped by the SDK: a malformed request
is instead recorded as ``rejected`` with a typed error that ``state`` and the UI show, and
the conversation goes on.
"""

# No ``from __future__ import annotations`` here: the sandbox re-imports this module for
# every workflow run, and temporalio reads the handlers' type hints each time; evaluated
# annotations spare it compiling each string again (~0.4 ms a module exec, measured
# outside the sandbox).

import asyncio
import functools
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError, ChildWorkflowError, FailureError

with workflow.unsafe.imports_passed_through():
    from durable_turns.contract import (
        ADD_MESSAGES,
        CONVERSATION_ID,
        CONVERSATION_WORKFLOW,
        HANDED_OVER,
        INVALID_ID,
        MARK_CANCEL,
        MAX_REQUEST_BYTES,
        MAX_TOOL_RESULT_BYTES,
        OPEN_CONVERSATION_WITH_DEFAULTS,
        QUERY_STATE,
        SIGNAL_ADD,
        SIGNAL_CANCEL,
        SIGNAL_CONTINUE,
        SIGNAL_SUBMIT,
        SIGNAL_TOOL_RESULT,
        TURN_MODEL,
        TURN_SIGNAL_TOOL_RESULT,
        TURN_STATUS,
        TURN_TASK_TIMEOUT_S,
        TURN_WORKFLOW,
        UNKNOWN_SIGNAL,
        UPDATE_SEND,
        UPDATE_START,
        ConversationInput,
        ConversationOpened,
        ConversationState,
        PendingRequest,
        RequestRecord,
        TurnResult,
        model_attribute,
    )
    from durable_turns.workflows import conversation_machine as machine
    from durable_turns.workflows import options
    from durable_turns.workflows.conversation_machine import (
        TURN_START_ATTEMPTS,
        CancelTurn,
        Conversation,
        Decision,
        ForwardToolResults,
        Note,
        Rejected,
        TurnStart,
    )
    from durable_turns.workflows.intake import ABSENT, Inbox, decode, payload_size, unfold

INBOX_SIGNALS = frozenset(
    {SIGNAL_SUBMIT, SIGNAL_CONTINUE, SIGNAL_CANCEL, SIGNAL_TOOL_RESULT, SIGNAL_ADD}
)

CANCEL_MARK = "cancel-mark"
"""Patch (added after 1.0.0; may be deprecated once no conversation run that predates it is
open): a cancel of the running turn also writes its cancel mark (``MARK_CANCEL``, a local
activity)."""

MARK_CANCEL_TIMEOUT = timedelta(seconds=10)
MARK_CANCEL_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(milliseconds=200))

KINDS = {
    SIGNAL_SUBMIT: machine.SUBMIT,
    SIGNAL_CONTINUE: machine.CONTINUE,
    SIGNAL_CANCEL: machine.CANCEL,
    SIGNAL_ADD: machine.ADD,
    SIGNAL_TOOL_RESULT: machine.TOOL_RESULT,
}
"""The machine's name for each signal the conversation takes."""


def _failure(rejected: Rejected) -> ApplicationError:
    return ApplicationError(rejected.message, type=rejected.type, non_retryable=True)


def _suggested() -> bool:
    return workflow.info().is_continue_as_new_suggested()


def _new_id() -> str:
    return str(workflow.uuid4())


@workflow.defn(name=CONVERSATION_WORKFLOW)
class ConversationWorkflow:
    @workflow.init
    def __init__(self, input: ConversationInput | None = None) -> None:
        self.machine = Conversation(workflow.info().workflow_id, input, _new_id)
        self._turn: workflow.ChildWorkflowHandle[Any, TurnResult] | None = None
        self._responses: set[asyncio.Task[Any]] = set()
        """Work that runs beside the loop (on_chat_response, forwarding tool results, the
        inbox's drain): a hand-over waits for it."""
        self._forwarder: asyncio.Task[None] | None = None
        self._inbox = Inbox(self._take)

    # --- the loop -------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: ConversationInput | None = None) -> None:
        m = self.machine
        conversation_id = m.id
        if m.id_problem:
            # Not a conversation id (too long, control characters, or a turn's id pattern):
            # nothing was queued (every request was rejected), and the starter learns why.
            workflow.set_current_details(f"**invalid conversation id**: {m.id_problem}")
            raise ApplicationError(
                f"invalid conversation id: {m.id_problem}", type=INVALID_ID, non_retryable=True
            )
        # set once; a continue-as-new carries it over
        if workflow.info().typed_search_attributes.get(CONVERSATION_ID) != conversation_id:
            workflow.upsert_search_attributes([CONVERSATION_ID.value_set(conversation_id)])
        if m.state.turn_count is None:
            # The store may be down: the activity retries until it answers (no attempt limit).
            m.waiting_for = "store"
            workflow.set_current_details(
                "opening the conversation: **waiting for the store** (retrying until it answers)"
            )
            # a local activity: no round trip to the server before the first turn starts
            opened = await workflow.execute_local_activity(
                OPEN_CONVERSATION_WITH_DEFAULTS,
                conversation_id,
                result_type=ConversationOpened,
                start_to_close_timeout=options.SHORT,
                retry_policy=options.BOOKKEEPING_RETRY,
                summary="open conversation",
            )
            workflow.set_current_details(m.opened(opened))
        while True:
            await workflow.wait_condition(lambda: bool(m.state.queue) or _suggested())
            if m.state.queue and _suggested():
                # History is long and requests are waiting: hand them over to a new run
                # (what is carried is bounded by MAX_QUEUED_BYTES, whatever is queued).
                # Updates still waiting are told to retry there (HANDED_OVER).
                m.hand_over()
                await workflow.wait_condition(self._settled)
                break
            if m.state.queue:
                await self._next_turn()
                continue
            # History is long and nothing is queued: hand over to a new run once every
            # handler is done. A request that arrives meanwhile is run first (an update
            # waiting for its turn would otherwise never finish).
            await workflow.wait_condition(lambda: bool(m.state.queue) or self._settled())
            if not m.state.queue:
                break
        workflow.continue_as_new(m.carry())

    def _settled(self) -> bool:
        return workflow.all_handlers_finished() and not self._responses

    async def _next_turn(self) -> None:
        m = self.machine
        head = m.state.queue[0]
        if m.debounces(head):
            ms = m.debounce_ms(head)
            while (left := m.quiet_left(ms, workflow.now())) is not None:
                workflow.set_current_details(f"debounce: waiting for {ms} ms without a new message")
                try:
                    await workflow.wait_condition(
                        functools.partial(self._moved_since, m.arrivals),
                        timeout=timedelta(milliseconds=left),
                    )
                except TimeoutError:
                    pass
                if m.handing_over:
                    break
            if not m.state.queue or m.state.queue[0] is not head:
                return  # cancelled, or handed over, while it waited: the loop looks again
        request = m.take_next()
        if request.kind == machine.ADD:
            await self._add(request)
            return
        result = await self._run_turn(request)
        done = m.turn_done(request, result)
        workflow.set_current_details(done.details)
        if done.respond:
            self._beside(self._respond(result))

    def _moved_since(self, arrivals: int) -> bool:
        """A turn request came since ``arrivals``, or the run hands over."""
        return self.machine.arrivals != arrivals or self.machine.handing_over

    async def _run_turn(self, request: PendingRequest) -> TurnResult:
        m = self.machine
        start = m.turn_begins(request)
        workflow.set_current_details(
            f"running turn {start.number} (request `{request.request_id}`)"
        )
        try:
            for attempt in range(TURN_START_ATTEMPTS):
                try:
                    self._turn = await self._start_turn(start)
                    break
                except FailureError as err:
                    # The id is taken (something a client started under a turn's id) or the
                    # start failed otherwise: never fail the conversation over it.
                    workflow.logger.warning("turn %s could not start: %s", start.workflow_id, err)
                    failed = m.turn_start_failed(start, attempt, str(err))
                    if failed is not None:
                        return failed
            m.turn_started(start)
            assert self._turn is not None
            return await self._turn
        except ChildWorkflowError as err:
            cause = err.cause or err
            return m.turn_failed(start, type(cause).__name__, str(cause))
        finally:
            m.turn_ended()
            self._turn = None

    async def _start_turn(self, start: TurnStart) -> workflow.ChildWorkflowHandle[Any, TurnResult]:
        attributes = [
            SearchAttributePair(CONVERSATION_ID, self.machine.id),
            SearchAttributePair(TURN_STATUS, "running"),
        ]
        if start.input.model:  # free at the start; the turn upserts it only if it differs
            attributes.append(SearchAttributePair(TURN_MODEL, model_attribute(start.input.model)))
        return await workflow.start_child_workflow(
            TURN_WORKFLOW,
            start.input,
            id=start.workflow_id,
            result_type=TurnResult,
            task_timeout=timedelta(seconds=TURN_TASK_TIMEOUT_S),
            static_summary=start.summary,
            static_details=start.details,
            search_attributes=TypedSearchAttributes(attributes),
        )

    async def _add(self, request: PendingRequest) -> None:
        """An ``addMessages`` request's turn in the queue: its messages into the store."""
        m = self.machine
        workflow.set_current_details(m.add_begins(request))
        n = len(request.messages)
        try:
            # The store may be down: retried until it answers (the messages were validated
            # and sized here, so no retry is caused by their content).
            await workflow.execute_activity(
                ADD_MESSAGES,
                args=[m.id, request.messages],
                start_to_close_timeout=options.SHORT,
                retry_policy=options.BOOKKEEPING_RETRY,
                summary=f"add {n} message(s)",
            )
        finally:
            m.running = None
        workflow.set_current_details(m.add_done(request))

    async def _respond(self, result: TurnResult) -> None:
        """on_chat_response runs after the turn lock is released: it may submit a follow-up."""
        await options.chat_response(result, f"on_chat_response · turn {result.turn_number}")

    def _beside(self, work: Any) -> asyncio.Task[Any]:
        """Work beside the loop, which a hand-over waits for."""
        task = asyncio.create_task(work)
        self._responses.add(task)
        task.add_done_callback(self._responses.discard)
        return task

    def _obey(self, decisions: list[Decision]) -> None:
        """Carry out what the machine answered to a request."""
        for decision in decisions:
            if isinstance(decision, Note):
                if decision.log is not None:
                    workflow.logger.warning("%s", decision.log)
                workflow.set_current_details(decision.details)
            elif isinstance(decision, CancelTurn):
                if self._turn is not None:
                    running = self.machine.running
                    if running is not None and workflow.patched(CANCEL_MARK):
                        self._beside(self._mark_cancel(running.request_id))
                    self._turn.cancel()  # the fallback: the step learns at its next heartbeat
            elif isinstance(decision, ForwardToolResults) and self._forwarder is None:
                self._forwarder = self._beside(self._forward_tool_results())

    async def _mark_cancel(self, request_id: str) -> None:
        """The running step's cancel mark (``streams.cancel``): it stops within a fraction of
        a second instead of at its next heartbeat. Best effort: the turn's cancel stands."""
        try:
            await workflow.execute_local_activity(
                MARK_CANCEL,
                args=[self.machine.id, request_id],
                start_to_close_timeout=MARK_CANCEL_TIMEOUT,
                retry_policy=MARK_CANCEL_RETRY,
                summary="cancel mark",
            )
        except Exception as err:
            workflow.logger.info("cancel mark not written: %s", err)

    async def _forward_tool_results(self) -> None:
        """One tool result at a time to the running turn, one signal per workflow task: each
        is up to MAX_TOOL_RESULT_BYTES, and a burst forwarded at once (one command each, in
        one task's completion) went past gRPC's 4 MiB message limit, and Temporal terminates
        a workflow whose task cannot be sent. What is left when the turn ends is dropped (no
        call waits for it any more)."""
        try:
            while (item := self.machine.take_tool_result()) is not None:
                turn = self._turn
                if turn is None:
                    continue
                try:
                    await turn.signal(TURN_SIGNAL_TOOL_RESULT, item[0])
                except Exception as err:  # the turn ended meanwhile: nothing waits for it
                    workflow.logger.info("tool result not forwarded: %s", err)
        finally:
            self._forwarder = None

    # --- requests ---------------------------------------------------------------------------
    # Handlers take the raw payload (workflows.intake): the SDK would otherwise drop what it
    # cannot decode, silently. Every rejection is cheap and typed; nothing raises here except
    # an ApplicationError that fails one update, never the workflow task.

    def _receive(self, kind: str, raw: RawValue) -> None:
        """A signal as it arrives: into the inbox (O(1), nothing parsed)."""
        limit, what = (
            (MAX_TOOL_RESULT_BYTES, "tool result")
            if kind == SIGNAL_TOOL_RESULT
            else (MAX_REQUEST_BYTES, "request")
        )
        try:
            drain = self._inbox.offer(kind, raw, limit, what)
        except Rejected as e:
            self._obey(self.machine.reject(None, e.type, e.message))
            return
        if drain is not None:
            self._responses.add(drain)
            drain.add_done_callback(self._responses.discard)

    def _take(self, kind: str, raw: RawValue) -> None:
        """Decode one signal from the inbox and hand it to the machine."""
        limit, what = (
            (MAX_TOOL_RESULT_BYTES, "tool result")
            if kind == SIGNAL_TOOL_RESULT
            else (MAX_REQUEST_BYTES, "request")
        )
        try:
            value = decode(raw, limit, what)
        except Rejected as e:
            self._obey(self.machine.reject(None, e.type, e.message))
            return
        self._obey(self.machine.signal(KINDS[kind], value, payload_size(raw), workflow.now()))

    @workflow.signal(name=SIGNAL_SUBMIT)
    def submit_messages(self, raw: RawValue = ABSENT) -> None:
        """New messages; a malformed request is recorded as rejected, never dropped silently."""
        self._receive(SIGNAL_SUBMIT, raw)

    @workflow.signal(name=SIGNAL_ADD)
    def add_messages(self, raw: RawValue = ABSENT) -> None:
        """Messages for the transcript without a turn (Think's ``addMessages()``), queued
        with the turns; a malformed request is recorded as rejected."""
        self._receive(SIGNAL_ADD, raw)

    @workflow.signal(name=SIGNAL_CONTINUE)
    def continue_last_turn(self, raw: RawValue = ABSENT) -> None:
        """Continue the last assistant message (skipped when there is none).

        The continuation runs with the last request's model, and its body unless one is given.
        """
        self._receive(SIGNAL_CONTINUE, raw)

    @workflow.signal(name=SIGNAL_CANCEL)
    def cancel_chat(self, raw: RawValue = ABSENT) -> None:
        """Cancel a queued request (it never runs) or the running turn (it ends "aborted")."""
        self._receive(SIGNAL_CANCEL, raw)

    @workflow.signal(name=SIGNAL_TOOL_RESULT)
    def submit_tool_result(self, raw: RawValue = ABSENT) -> None:
        """A client tool's result or an approval, for the turn that waits on it (forwarded
        one signal per workflow task)."""
        self._receive(SIGNAL_TOOL_RESULT, raw)

    @workflow.signal(dynamic=True)
    def any_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """A batch of one signal sent as one (``intake.FOLD_PREFIX``): each payload goes into
        the inbox as its own signal would have; or a signal of a name the
        conversation does not take, recorded as rejected (``UnknownSignal``) rather than kept
        waiting for a handler that never comes."""
        kind = unfold(name)
        if kind is not None and kind in INBOX_SIGNALS:
            for raw in args:
                self._receive(kind, raw)
            return
        shown = name[:100] + ("…" if len(name) > 100 else "")
        self._obey(
            self.machine.reject(
                None,
                UNKNOWN_SIGNAL,
                f"no signal named {shown!r}: a conversation takes"
                f" {', '.join(sorted(INBOX_SIGNALS))}",
            )
        )

    @workflow.update(name=UPDATE_SEND)
    async def send_message(self, raw: RawValue = ABSENT) -> TurnResult:
        """Submit messages and wait for the turn's result.

        Retried with a request id it knows, it waits for (or returns) that request's result;
        a result no longer held is a ``RequestExpired`` error, never a wait without end.
        """
        m = self.machine
        request_id = await self._admit(raw)
        expired = m.expired(request_id)
        if expired is not None:
            raise _failure(expired)
        await workflow.wait_condition(lambda: request_id in m.results or m.handing_over)
        if request_id in m.results:
            return m.results[request_id]
        raise _handed_over(request_id)

    @workflow.update(name=UPDATE_START)
    async def start_turn(self, raw: RawValue = ABSENT) -> RequestRecord:
        """Submit messages and return as soon as their turn has started: its number and
        workflow id, so a client follows the turn's live stream and waits for its result
        without polling. A request that ends without a turn (cancelled) comes back with
        its final status; retried with a known request id, it answers for that request."""
        m = self.machine
        request_id = await self._admit(raw)
        record = m.records[request_id]
        await workflow.wait_condition(lambda: m.started(record) or m.handing_over)
        if not m.started(record):
            raise _handed_over(request_id)
        return record.model_copy()

    async def _admit(self, raw: RawValue) -> str:
        """Queue a request (or find the one its request id names), after the signals that
        came before it; its request id."""
        if self._inbox.taken < self._inbox.received:
            ticket = self._inbox.received
            await workflow.wait_condition(lambda: self._inbox.taken >= ticket)
        try:
            value = decode(raw, MAX_REQUEST_BYTES)
            request_id, decisions = self.machine.admit(value, payload_size(raw), workflow.now())
        except Rejected as e:
            raise _failure(e) from None
        self._obey(decisions)
        return request_id

    @send_message.validator
    def _validate_send(self, raw: RawValue = ABSENT) -> None:
        # validators never run on replay, so the newest rules apply
        try:
            if self.machine.id_problem:
                self.machine.validate(None)  # raises InvalidConversationId
            self.machine.validate(decode(raw, MAX_REQUEST_BYTES))
        except Rejected as e:
            raise _failure(e) from None

    @start_turn.validator
    def _validate_start(self, raw: RawValue = ABSENT) -> None:
        self._validate_send(raw)

    @workflow.query(name=QUERY_STATE)
    def state(self) -> ConversationState:
        return self.machine.view()


def _handed_over(request_id: str) -> ApplicationError:
    return ApplicationError(
        f"the conversation continued as new with request {request_id!r} still queued:"
        " send the same request again (same request id) to wait for it",
        type=HANDED_OVER,
    )
