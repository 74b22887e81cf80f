"""``ConversationWorkflow``: one per conversation id; the turn lock and the request queue.

It keeps only small state: the queue of pending requests (each with its new messages), the
turn counter and recent outcomes. Each turn runs as a child ``TurnWorkflow``, one at a
time, so turns of one conversation never overlap. Signals take raw JSON and validate it
here, because a signal whose argument fails to decode is silently dropped by the SDK: a
malformed request is instead recorded as ``rejected`` with a typed error that ``state`` and
the UI show, and the conversation goes on.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from durable_turns.contract import (
        CHAT_RESPONSE,
        CONVERSATION_ID,
        CONVERSATION_WORKFLOW,
        MAX_REQUEST_BYTES,
        OPEN_CONVERSATION,
        QUERY_STATE,
        SIGNAL_CANCEL,
        SIGNAL_CONTINUE,
        SIGNAL_SUBMIT,
        SIGNAL_TOOL_RESULT,
        TURN_SIGNAL_TOOL_RESULT,
        TURN_STATUS,
        TURN_WORKFLOW,
        UPDATE_SEND,
        CancelChat,
        ChatResponseInput,
        ContinueLastTurn,
        ConversationSettings,
        ConversationState,
        ErrorInfo,
        RequestRecord,
        SubmitMessages,
        TurnInput,
        TurnResult,
        turn_workflow_id,
        validation_problems,
    )
    from durable_turns.messages import Message, Usage
    from durable_turns.workflows import options

RECENT = 50
"""How many finished requests ``state`` remembers (and carries over continue-as-new)."""


class PendingRequest(BaseModel):
    request_id: str
    kind: str = "submit"
    messages: list[Message] = Field(default_factory=list)
    body: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None


class ConversationInput(ConversationSettings):
    """The workflow's optional input: settings, plus the state continue-as-new carries."""

    turn_count: int | None = None
    queue: list[PendingRequest] = Field(default_factory=list)
    recent: list[RequestRecord] = Field(default_factory=list)
    last_result: TurnResult | None = None
    last_body: dict[str, Any] = Field(default_factory=dict)
    last_model: str | None = None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None


class InvalidRequest(ValueError):
    """A client request that cannot be run (malformed, oversized, duplicate)."""


@workflow.defn(name=CONVERSATION_WORKFLOW)
class ConversationWorkflow:
    @workflow.init
    def __init__(self, input: ConversationInput | None = None) -> None:
        inp = input or ConversationInput()
        self._settings = ConversationSettings(model=inp.model, max_steps=inp.max_steps)
        self._turn_count = inp.turn_count
        self._queue: deque[PendingRequest] = deque(inp.queue)
        self._records: dict[str, RequestRecord] = {r.request_id: r for r in inp.recent}
        for p in inp.queue:
            self._records[p.request_id] = RequestRecord(request_id=p.request_id, kind=p.kind)  # type: ignore[arg-type]
        self._results: dict[str, TurnResult] = {}
        self._last_result = inp.last_result
        self._last_body = inp.last_body
        self._last_model = inp.last_model
        self._usage = inp.usage
        self._cost = inp.cost_usd
        self._running: PendingRequest | None = None
        self._running_turn: workflow.ChildWorkflowHandle[Any, TurnResult] | None = None
        self._responses: set[asyncio.Task[Any]] = set()

    # --- the loop -------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: ConversationInput | None = None) -> None:
        conversation_id = workflow.info().workflow_id
        if self._turn_count is None:
            self._turn_count = await workflow.execute_activity(
                OPEN_CONVERSATION,
                conversation_id,
                result_type=int,
                start_to_close_timeout=options.SHORT,
                heartbeat_timeout=options.BEGIN_HEARTBEAT,
                retry_policy=options.BOOKKEEPING_RETRY,
                summary="open conversation",
            )
        while True:
            await workflow.wait_condition(
                lambda: bool(self._queue) or workflow.info().is_continue_as_new_suggested()
            )
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
        request = self._queue.popleft()
        result = await self._run_turn(conversation_id, request)
        self._complete(request, result)
        if result.auto_continue:  # client tool results arrived: continue before anything else
            follow = PendingRequest(
                request_id=str(workflow.uuid4()),
                kind="continue",
                body=request.body,
                model=request.model,
            )
            self._queue.appendleft(follow)
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
        try:
            self._running_turn = await workflow.start_child_workflow(
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
                ),
                id=turn_workflow_id(conversation_id, number),
                result_type=TurnResult,
                static_summary=_summary(number, conversation_id, model, continuation),
                static_details=_details(request),
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(CONVERSATION_ID, conversation_id),
                        SearchAttributePair(TURN_STATUS, "running"),
                    ]
                ),
            )
            # only now does the turn exist for clients that look it up by number
            record.status, record.turn_number = "running", number
            return await self._running_turn
        except ChildWorkflowError as err:
            cause = err.cause or err
            return TurnResult(
                request_id=request.request_id,
                conversation_id=conversation_id,
                turn_number=number,
                workflow_id=turn_workflow_id(conversation_id, number),
                status="error",
                continuation=continuation,
                error=ErrorInfo(type=type(cause).__name__, message=str(cause), stage="turn"),
            )
        finally:
            self._running = None
            self._running_turn = None

    def _complete(self, request: PendingRequest, result: TurnResult) -> None:
        record = self._records[request.request_id]
        record.status = result.status
        record.error = result.error
        self._results[request.request_id] = result
        self._last_result = result
        self._usage = self._usage + result.usage
        if result.cost_usd is not None:
            self._cost = (self._cost or 0.0) + result.cost_usd
        while len(self._results) > RECENT:
            self._results.pop(next(iter(self._results)))
        self._trim()
        workflow.set_current_details(
            f"turn {result.turn_number}: **{result.status}**"
            + (f" — {result.error.message}" if result.error else "")
        )

    async def _respond(self, result: TurnResult) -> None:
        """on_chat_response runs after the turn lock is released: it may submit a follow-up."""
        await workflow.execute_activity(
            CHAT_RESPONSE,
            ChatResponseInput(result=result),
            start_to_close_timeout=options.SHORT,
            heartbeat_timeout=options.BEGIN_HEARTBEAT,
            retry_policy=options.BOOKKEEPING_RETRY,
            summary=f"on_chat_response · turn {result.turn_number}",
        )

    # --- requests ---------------------------------------------------------------------------

    @workflow.signal(name=SIGNAL_SUBMIT)
    def submit_messages(self, raw: Any = None) -> None:
        """New messages; a malformed request is recorded as rejected, never dropped silently."""
        try:
            self._enqueue(self._parse_submit(raw))
        except InvalidRequest as e:
            self._reject(raw, "InvalidRequest", str(e))

    @workflow.update(name=UPDATE_SEND)
    async def send_message(self, raw: Any = None) -> TurnResult:
        """Submit messages and wait for the turn's result."""
        request = self._parse_submit(raw)
        request_id = request.request_id or ""
        if request_id not in self._records:
            request_id = self._enqueue(request)
        await workflow.wait_condition(lambda: request_id in self._results)
        return self._results[request_id]

    @send_message.validator
    def _validate_send(self, raw: Any = None) -> None:
        request = self._parse_submit(raw)
        if request.request_id in self._records and request.request_id not in self._results:
            known = self._records[request.request_id]
            if known.status in ("rejected", "aborted"):
                raise InvalidRequest(f"request {request.request_id!r} was {known.status}")

    @workflow.signal(name=SIGNAL_CONTINUE)
    def continue_last_turn(self, raw: Any = None) -> None:
        """Continue the last assistant message (skipped when there is none).

        The continuation runs with the last request's model, and its body unless one is given.
        """
        try:
            req = ContinueLastTurn.model_validate(raw or {})
        except ValidationError as e:
            self._reject(raw, "InvalidRequest", _explain(e))
            return
        request_id = req.request_id or str(workflow.uuid4())
        if request_id in self._records:
            return
        body = req.body if req.body is not None else self._last_body
        self._queue.append(
            PendingRequest(
                request_id=request_id, kind="continue", body=body, model=self._last_model
            )
        )
        self._records[request_id] = RequestRecord(request_id=request_id, kind="continue")

    @workflow.signal(name=SIGNAL_CANCEL)
    def cancel_chat(self, raw: Any = None) -> None:
        """Cancel a queued request (it never runs) or the running turn (it ends "aborted")."""
        try:
            req = CancelChat.model_validate(raw or {})
        except ValidationError as e:
            self._reject(raw, "InvalidRequest", _explain(e))
            return
        target = req.request_id
        for pending in list(self._queue):
            if target is None or pending.request_id == target:
                if target is None:
                    break  # no id: cancel the running turn only
                self._queue.remove(pending)
                record = self._records[pending.request_id]
                record.status = "aborted"
                self._results[pending.request_id] = TurnResult(
                    request_id=pending.request_id,
                    conversation_id=workflow.info().workflow_id,
                    turn_number=0,
                    workflow_id="",
                    status="aborted",
                    continuation=pending.kind == "continue",
                )
                return
        running = self._running
        if self._running_turn is not None and running and target in (None, running.request_id):
            self._running_turn.cancel()

    @workflow.signal(name=SIGNAL_TOOL_RESULT)
    async def submit_tool_result(self, raw: Any = None) -> None:
        """A client tool's result or an approval, for the turn that waits on it."""
        if self._running_turn is None:
            self._reject(raw, "InvalidRequest", "no turn is running, so no tool call is waiting")
            return
        await self._running_turn.signal(TURN_SIGNAL_TOOL_RESULT, raw)

    @workflow.query(name=QUERY_STATE)
    def state(self) -> ConversationState:
        running = self._records.get(self._running.request_id) if self._running else None
        return ConversationState(
            conversation_id=workflow.info().workflow_id,
            turn_count=self._turn_count or 0,
            running=running,
            queue=[self._records[p.request_id] for p in self._queue],
            recent=[r for r in self._records.values() if r.status not in ("queued", "running")],
            last_result=self._last_result,
            usage=self._usage,
            cost_usd=self._cost,
        )

    # --- helpers ----------------------------------------------------------------------------

    def _parse_submit(self, raw: Any) -> SubmitMessages:
        size = len(json.dumps(raw, default=str))
        if size > MAX_REQUEST_BYTES:
            raise InvalidRequest(
                f"request is {size} bytes; the limit is {MAX_REQUEST_BYTES} bytes."
                " Send large content by reference (a URL or a file id)."
            )
        try:
            return SubmitMessages.model_validate(raw)
        except ValidationError as e:
            raise InvalidRequest(_explain(e)) from None

    def _enqueue(self, req: SubmitMessages) -> str:
        request_id = req.request_id or str(workflow.uuid4())
        if request_id in self._records:
            return request_id  # idempotent: the same request id is accepted once
        messages = [
            m if m.id else m.model_copy(update={"id": f"{request_id}/{i}"})
            for i, m in enumerate(req.messages)
        ]
        self._queue.append(
            PendingRequest(request_id=request_id, messages=messages, body=req.body, model=req.model)
        )
        self._records[request_id] = RequestRecord(request_id=request_id)
        self._last_body = req.body
        self._last_model = req.model
        return request_id

    def _reject(self, raw: Any, error_type: str, message: str) -> None:
        given = raw.get("request_id") if isinstance(raw, dict) else None
        request_id = given if isinstance(given, str) and given not in self._records else None
        request_id = request_id or f"rejected-{workflow.uuid4()}"
        error = ErrorInfo(type=error_type, message=message, stage="parse")
        self._records[request_id] = RequestRecord(
            request_id=request_id, status="rejected", error=error
        )
        self._trim()
        workflow.logger.warning("rejected request %s: %s", request_id, message)
        workflow.set_current_details(f"**rejected request** `{request_id}`: {message}")

    def _trim(self) -> None:
        done = [k for k, r in self._records.items() if r.status not in ("queued", "running")]
        for key in done[: max(len(done) - RECENT, 0)]:
            del self._records[key]

    def _carry(self) -> ConversationInput:
        return ConversationInput(
            model=self._settings.model,
            max_steps=self._settings.max_steps,
            turn_count=self._turn_count,
            queue=list(self._queue),
            recent=[r for r in self._records.values() if r.status not in ("queued", "running")],
            last_result=self._last_result,
            last_body=self._last_body,
            last_model=self._last_model,
            usage=self._usage,
            cost_usd=self._cost,
        )


def _explain(error: ValidationError) -> str:
    return f"malformed request: {validation_problems(error, limit=5)}"


def _summary(number: int, conversation_id: str, model: str | None, continuation: bool) -> str:
    kind = "continuation" if continuation else "turn"
    text = f"{kind} {number} · conv {conversation_id}" + (f" · {model}" if model else "")
    return text[:200]


def _details(request: PendingRequest) -> str:
    lines = [f"**request** `{request.request_id}` ({request.kind})"]
    for message in request.messages:
        head = message.text[:500]
        lines.append(f"### {message.role}\n{head}")
    if request.body:
        lines.append("**body**: `" + json.dumps(request.body)[:500] + "`")
    return "\n\n".join(lines)[:20000]
