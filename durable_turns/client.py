"""The Python client API for application backends.

    client = await TurnsClient.connect()
    result = await client.send("conv-1", "What's the weather in Paris?")
    print(result.text)

Everything here is also reachable from any Temporal client by the wire names of
``durable_turns.contract``; this module only makes the common calls one line each.

Why it is long (about 570 lines): one method per operation a backend calls (start, send,
regenerate, submit, tool results, approvals, cancel, state, wait, chunks), each short and
documented, on one class, so the whole client API is read in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.service import RPCError, RPCStatusCode

from durable_turns._temporal.interceptors import update_bound
from durable_turns.codec import data_converter_from_env
from durable_turns.config import Settings
from durable_turns.contract import (
    CONVERSATION_WORKFLOW,
    HANDED_OVER,
    QUERY_STATE,
    REGENERATE_LAST,
    SIGNAL_ADD,
    SIGNAL_CANCEL,
    SIGNAL_CONTINUE,
    SIGNAL_SUBMIT,
    SIGNAL_TOOL_RESULT,
    UPDATE_SEND,
    UPDATE_START,
    ConversationState,
    ErrorInfo,
    InvalidId,
    RequestRecord,
    TurnResult,
    added_request_id,
    check_conversation_id,
    check_metadata,
    check_not_empty,
    id_problem,
    regenerate_problem,
    turn_id,
    turn_workflow_id,
)
from durable_turns.errors import NoWorker
from durable_turns.messages import Message, user_message
from durable_turns.presence import (
    TASK_WAIT_S,
    WAITING,
    Workers,
    conversation_problem,
    workers,
)

if TYPE_CHECKING:
    from durable_turns.streams import ChunkStreamBackend, StreamEvent

FINAL = ("completed", "error", "aborted", "skipped", "rejected")


R = TypeVar("R")


class TurnsClient:
    def __init__(self, client: Client, task_queue: str, stream_url: str | None = None) -> None:
        self.client = client
        self.task_queue = task_queue
        self.stream_url = stream_url
        self._streams: ChunkStreamBackend | None = None

    @classmethod
    async def connect(cls, settings: Settings | None = None) -> TurnsClient:
        settings = settings or Settings.from_env()
        client = await Client.connect(
            settings.address,
            namespace=settings.namespace,
            data_converter=data_converter_from_env(),
            interceptors=[update_bound()],  # no update a worker could not answer is sent
        )
        return cls(client, settings.task_queue, settings.resolved_chunk_stream_url)

    async def aclose(self) -> None:
        if self._streams is not None:
            await self._streams.close()
            self._streams = None

    def conversation(self, conversation_id: str) -> WorkflowHandle[Any, Any]:
        """The conversation's handle; raises ``InvalidId`` for an id that breaks the id rules
        (``durable_turns.contract.MAX_ID_BYTES``), before anything is sent."""
        return self.client.get_workflow_handle(check_conversation_id(conversation_id))

    async def exists(self, conversation_id: str) -> bool:
        """Whether the conversation's workflow is known to the server (running, or closed
        and still within the namespace's retention). ``send``, ``submit``,
        ``continue_last_turn`` and ``regenerate`` start a conversation that does not exist;
        ask this first where a typo must not make one (``turns continue`` does)."""
        try:
            await self.conversation(conversation_id).describe()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    @staticmethod
    def request(
        content: str | list[Message],
        *,
        model: str | None = None,
        body: dict[str, Any] | None = None,
        request_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The JSON of a ``submitMessages``/``sendMessage`` request. ``metadata``: the
        turn's metadata (a JSON object of at most ``contract.MAX_METADATA_BYTES``; raises
        ``InvalidMetadata`` before anything is sent). A message with nothing in it (no
        part, only empty or whitespace text) raises ``EmptyMessage``: a turn needs
        something to answer."""
        messages = check_not_empty([user_message(content)] if isinstance(content, str) else content)
        if request_id is not None and (problem := id_problem(request_id, "request id")):
            raise InvalidId(problem)
        request: dict[str, Any] = {
            "messages": [m.model_dump(mode="json") for m in messages],
            "request_id": request_id or str(uuid.uuid4()),
            "body": body or {},
            "model": model,
        }
        if metadata := check_metadata(metadata):  # sent only when there is some
            request["metadata"] = metadata
        return request

    async def send(
        self,
        conversation_id: str,
        content: str | list[Message],
        *,
        model: str | None = None,
        body: dict[str, Any] | None = None,
        request_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> TurnResult:
        """Submit messages and wait for the turn's result (update-with-start).

        When the conversation continues-as-new while the request waits (``ContinuedAsNew``),
        the update is sent again with the same request id: the new run has it queued.
        """
        check_conversation_id(conversation_id)
        request = self.request(
            content, model=model, body=body, request_id=request_id, metadata=metadata
        )
        return await self._update_with_start(conversation_id, UPDATE_SEND, request, TurnResult)

    async def start(
        self,
        conversation_id: str,
        content: str | list[Message],
        *,
        model: str | None = None,
        body: dict[str, Any] | None = None,
        request_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> RequestRecord:
        """Submit messages and return as soon as their turn has started (update-with-start
        ``startTurn``): its ``turn_number`` and ``workflow_id``. Follow it with
        :meth:`chunks` and await it with :meth:`result`; neither polls."""
        check_conversation_id(conversation_id)
        request = self.request(
            content, model=model, body=body, request_id=request_id, metadata=metadata
        )
        return await self._update_with_start(conversation_id, UPDATE_START, request, RequestRecord)

    async def result(
        self, conversation_id: str, record: RequestRecord, poll_s: float = 0.1
    ) -> TurnResult:
        """The result of a request's turn: the turn workflow's own result (a long poll).

        Always a ``TurnResult``: a request that never got a turn comes back ``aborted`` or
        ``error`` (an ``addMessages`` request, which needs none, ``completed``), and a turn
        whose workflow itself failed (terminated, timed out) comes back ``error`` with the
        failure's type."""
        if record.turn_number is None:  # added, cancelled or rejected: no turn ran for it
            status = record.status if record.status in ("aborted", "completed") else "error"
            return TurnResult(
                request_id=record.request_id,
                conversation_id=conversation_id,
                turn_number=0,
                workflow_id="",
                status=status,
                error=record.error,
            )
        handle = self.client.get_workflow_handle(
            record.workflow_id or turn_workflow_id(conversation_id, record.turn_number),
            result_type=TurnResult,
        )
        while True:
            try:
                return await handle.result()
            except RPCError as e:  # started a moment ago: not visible yet
                if e.status != RPCStatusCode.NOT_FOUND:
                    raise
            except WorkflowFailureError as e:  # the turn's workflow itself failed
                cause: BaseException = e.cause
                if isinstance(cause, ActivityError | ChildWorkflowError) and cause.cause:
                    cause = cause.cause
                return TurnResult(
                    request_id=record.request_id,
                    conversation_id=conversation_id,
                    turn_number=record.turn_number,
                    workflow_id=handle.id,
                    status="error",
                    error=ErrorInfo(
                        type=getattr(cause, "type", None) or type(cause).__name__,
                        message=getattr(cause, "message", None) or str(cause),
                    ),
                )
            await asyncio.sleep(poll_s)

    async def _update_with_start(
        self, conversation_id: str, update: str, request: dict[str, Any], result_type: type[R]
    ) -> R:
        """An update-with-start on the conversation; sent again, with the same request id,
        when the conversation continued-as-new while the request waited (``ContinuedAsNew``):
        the new run has it queued."""
        while True:
            op: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
                CONVERSATION_WORKFLOW,
                id=conversation_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )
            try:
                return await self.client.execute_update_with_start_workflow(
                    update, request, start_workflow_operation=op, result_type=result_type
                )
            except WorkflowUpdateFailedError as e:
                cause = e.cause
                if not (isinstance(cause, ApplicationError) and cause.type == HANDED_OVER):
                    raise
            except BaseException:
                _settle(op)
                raise

    @staticmethod
    def regenerate_request(
        message_id: str = REGENERATE_LAST,
        *,
        model: str | None = None,
        body: dict[str, Any] | None = None,
        request_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The JSON of a regenerate request (``submitMessages``/``sendMessage``/``startTurn``
        with ``regenerate`` and no messages). ``model`` and ``body`` are sent only when
        given: without them the conversation uses its last request's (``metadata`` too)."""
        if problem := regenerate_problem(message_id):
            raise InvalidId(problem)
        if request_id is not None and (problem := id_problem(request_id, "request id")):
            raise InvalidId(problem)
        request: dict[str, Any] = {
            "regenerate": message_id,
            "request_id": request_id or str(uuid.uuid4()),
        }
        if model is not None:
            request["model"] = model
        if body is not None:
            request["body"] = body
        if metadata is not None:
            request["metadata"] = check_metadata(metadata)
        return request

    async def regenerate(
        self,
        conversation_id: str,
        message_id: str = REGENERATE_LAST,
        *,
        request_id: str | None = None,
        body: dict[str, Any] | None = None,
        model: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> TurnResult:
        """Regenerate a reply and wait for the new one (``sendMessage`` with ``regenerate``).

        ``message_id``: the stored id of an assistant message (``TurnResult.message_id``,
        ``<conversation id>/turn-<n>/assistant``), or ``"last"``: the reply the transcript
        ends with. The turn answers the user message before that reply again; the old reply
        and everything after it stay stored, marked superseded, out of every later context.
        Nothing to regenerate: a turn with status ``error`` and error type
        ``NothingToRegenerate``, and nothing changed."""
        check_conversation_id(conversation_id)
        request = self.regenerate_request(
            message_id, model=model, body=body, request_id=request_id, metadata=metadata
        )
        return await self._update_with_start(conversation_id, UPDATE_SEND, request, TurnResult)

    async def start_regenerate(
        self,
        conversation_id: str,
        message_id: str = REGENERATE_LAST,
        *,
        request_id: str | None = None,
        body: dict[str, Any] | None = None,
        model: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> RequestRecord:
        """:meth:`regenerate`, answering as soon as the turn has started (``startTurn``), as
        :meth:`start` does: follow it with :meth:`chunks`, await it with :meth:`result`."""
        check_conversation_id(conversation_id)
        request = self.regenerate_request(
            message_id, model=model, body=body, request_id=request_id, metadata=metadata
        )
        return await self._update_with_start(conversation_id, UPDATE_START, request, RequestRecord)

    async def submit(
        self,
        conversation_id: str,
        content: str | list[Message],
        *,
        model: str | None = None,
        body: dict[str, Any] | None = None,
        request_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Queue messages without waiting (signal-with-start); returns the request id."""
        req = self.request(
            content, model=model, body=body, request_id=request_id, metadata=metadata
        )
        await self._signal_with_start(conversation_id, SIGNAL_SUBMIT, req)
        return str(req["request_id"])

    async def add_messages(
        self,
        conversation_id: str,
        messages: str | list[Message],
        *,
        request_id: str | None = None,
    ) -> str:
        """Append messages to the transcript without running a turn (Think's
        ``addMessages()``; signal-with-start), after the turns queued before them; returns the
        request id. A string is one user message. Idempotent: by ``request_id``, or, without
        one, by the messages' ids when every message has one."""
        items = [user_message(messages)] if isinstance(messages, str) else messages
        if request_id is not None and (problem := id_problem(request_id, "request id")):
            raise InvalidId(problem)
        payload: dict[str, Any] = {"messages": [m.model_dump(mode="json") for m in items]}
        if request_id is None and not all(m.id for m in items):
            request_id = str(uuid.uuid4())
        if request_id is not None:
            payload["request_id"] = request_id
        await self._signal_with_start(conversation_id, SIGNAL_ADD, payload)
        return request_id or str(added_request_id([m.id for m in items]))

    async def continue_last_turn(
        self,
        conversation_id: str,
        *,
        body: dict[str, Any] | None = None,
        request_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Continue the last assistant message (``continueLastTurn``); returns the request
        id. Without ``body`` or ``metadata``, the last request's are used."""
        request_id = request_id or str(uuid.uuid4())
        payload: dict[str, Any] = {"request_id": request_id}
        if body is not None:
            payload["body"] = body
        if metadata is not None:
            payload["metadata"] = check_metadata(metadata)
        await self._signal_with_start(conversation_id, SIGNAL_CONTINUE, payload)
        return request_id

    async def submit_tool_result(
        self, conversation_id: str, tool_call_id: str, output: Any, *, is_error: bool = False
    ) -> None:
        """The result of a client tool the running turn waits on."""
        await self.conversation(conversation_id).signal(
            SIGNAL_TOOL_RESULT,
            {"tool_call_id": tool_call_id, "output": output, "is_error": is_error},
        )

    async def submit_tool_results(
        self, conversation_id: str, results: list[dict[str, Any]]
    ) -> None:
        """Several answers at once (``ToolResolution`` objects: client tool outputs and
        approvals), in one ``submitToolResult`` signal."""
        await self.conversation(conversation_id).signal(SIGNAL_TOOL_RESULT, results)

    async def approve(
        self,
        conversation_id: str,
        tool_call_id: str,
        approved: bool = True,
        reason: str | None = None,
    ) -> None:
        """Approve (or deny) a call to a tool declared ``needs_approval``."""
        await self.conversation(conversation_id).signal(
            SIGNAL_TOOL_RESULT,
            {"tool_call_id": tool_call_id, "approved": approved, "reason": reason},
        )

    async def pending_tool_calls(self, conversation_id: str) -> list[dict[str, Any]]:
        """The calls the running turn waits on: ``tool_call_id``, ``tool_name``, ``waiting_for``."""
        state = await self.state(conversation_id)
        if state.running is None or state.running.turn_number is None:
            return []
        turn = self.client.get_workflow_handle(
            state.running.workflow_id
            or turn_workflow_id(conversation_id, state.running.turn_number)
        )
        return list((await turn.query(QUERY_STATE))["pending_tool_calls"])

    async def cancel(self, conversation_id: str, request_id: str | None = None) -> None:
        if request_id is not None and self.stream_url:  # its step stops at once (streams.cancel)
            from durable_turns.streams.cancel import mark_cancel

            with contextlib.suppress(Exception):  # a hint: the signal is the cancel
                await mark_cancel(await self.stream_backend(), conversation_id, request_id)
        await self.conversation(conversation_id).signal(SIGNAL_CANCEL, {"request_id": request_id})

    async def state(self, conversation_id: str) -> ConversationState:
        """The conversation's ``state`` query. Only a worker answers it: when it has not
        answered within ``STATE_PROBE_S``, the server is asked whether a worker is there
        (``durable_turns.presence``), and again each ``STATE_PROBE_S`` while it waits; none
        raises ``NoWorker`` (``waiting for a worker: …``) instead of waiting out the query."""
        query = asyncio.ensure_future(
            self.conversation(conversation_id).query(QUERY_STATE, result_type=ConversationState)
        )
        try:
            while True:
                done, _ = await asyncio.wait({query}, timeout=STATE_PROBE_S)
                if done:
                    return query.result()
                problem = await self.waiting_for_worker(conversation_id, wait_s=STATE_TASK_WAIT_S)
                if problem and problem.startswith(WAITING):  # queued: a worker will answer
                    raise NoWorker(problem)
        finally:
            if not query.done():
                query.cancel()
                with contextlib.suppress(BaseException):
                    await query

    async def workers(self, task_queue: str | None = None) -> Workers:
        """The workers polling ``task_queue`` (default: the client's) now: two
        ``DescribeTaskQueue`` RPCs (``durable_turns.presence``)."""
        return await workers(self.client, task_queue or self.task_queue)

    async def waiting_for_worker(
        self,
        conversation_id: str,
        turn_number: int | None = None,
        known: Workers | None = None,
        wait_s: float = TASK_WAIT_S,
    ) -> str | None:
        """``waiting for a worker: …`` when no worker runs the conversation now (none polls
        its task queue, or its or its running turn's task waits unstarted), ``queued: …``
        when workers poll but its or its running turn's activity has waited a second for one
        of their activity slots (every slot busy: ``TURNS_MAX_CONCURRENT_ACTIVITIES``), else
        None (also when the server does not answer in time, or the conversation does not
        exist).
        ``known``: the task queue's workers, asked for already; ``wait_s``: how long a
        task must have waited unstarted to count."""
        turns = [turn_workflow_id(conversation_id, turn_number)] if turn_number else []
        try:
            return await conversation_problem(
                self.client,
                check_conversation_id(conversation_id),
                turn_ids=turns,
                known=known,
                wait_s=wait_s,
            )
        except RPCError:
            return None

    async def wait(self, conversation_id: str, request_id: str, poll_s: float = 0.1) -> TurnResult:
        """The result of a submitted request, once its turn has run (see :meth:`result`)."""
        record = await self._started(conversation_id, request_id, poll_s)
        return await self.result(conversation_id, record, poll_s)

    async def turn_number(self, conversation_id: str, request_id: str, poll_s: float = 0.05) -> int:
        """The turn a request runs as, once it has started (0 if it never will)."""
        record = await self._started(conversation_id, request_id, poll_s)
        return record.turn_number or 0

    async def _started(self, conversation_id: str, request_id: str, poll_s: float) -> RequestRecord:
        """A request's record once it has a turn, or once it ended without one."""
        while True:
            try:
                state = await self.state(conversation_id)
            except RPCError as e:  # a query needs a worker: none answered in time (one died)
                if e.status not in QUERY_RETRIED and not task_being_retried(e):
                    raise
                await asyncio.sleep(poll_s)
                continue
            except NoWorker:  # the request runs once one comes
                await asyncio.sleep(max(poll_s, STATE_PROBE_S))
                continue
            records = [*state.recent, *([state.running] if state.running else [])]
            record = next((r for r in records if r.request_id == request_id), None)
            if record is not None and (record.turn_number is not None or record.status in FINAL):
                return record
            await asyncio.sleep(poll_s)

    async def chunks(
        self, conversation_id: str, turn_number: int, after: int = -1
    ) -> AsyncIterator[StreamEvent]:
        """A turn's live chunk stream from an offset (-1: from the start), until it finishes.

        Reconnect with the last offset you saw to get exactly the events after it.
        ``reset`` events mean a retried model step: drop what that step streamed before.
        ``recovering`` events mean the turn resumes after a lost attempt (a worker died,
        the stream stalled): show it until the new attempt streams.
        Only what the conversation's own run of the turn streamed: nothing of a workflow
        started elsewhere under the turn's id.
        """
        streams = await self.stream_backend()
        stream = turn_id(conversation_id, turn_number)
        async for event in streams.follow(stream, after=after, by_conversation=True):
            yield event

    async def stream_backend(self) -> ChunkStreamBackend:
        """The chunk-stream backend this client follows live streams on
        (``TURNS_CHUNK_STREAM_URL``), opened on first use; the front door shares it."""
        from durable_turns.streams import open_stream_backend

        if self._streams is None:
            backend = open_stream_backend(self.stream_url)
            if backend is None:
                raise RuntimeError("live chunk streams are off (TURNS_CHUNK_STREAM_URL=none)")
            await backend.open()
            self._streams = backend
        return self._streams

    async def _signal_with_start(self, conversation_id: str, signal: str, arg: Any) -> None:
        await self.client.start_workflow(
            CONVERSATION_WORKFLOW,
            id=check_conversation_id(conversation_id),
            task_queue=self.task_queue,
            start_signal=signal,
            start_signal_args=[arg],
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )


STATE_PROBE_S = 0.5
"""``state``: a query unanswered this long is checked against the workers (a query answers
in milliseconds when a worker is there)."""

STATE_TASK_WAIT_S = 10.0
"""``state`` raises ``NoWorker`` for workers that poll only once a task of the conversation
has waited this long unstarted (busy workers on a loaded machine take seconds)."""


def task_being_retried(e: RPCError) -> bool:
    """Whether the server refused a query because the workflow's task is being retried (its
    worker died or failed mid-task: ``WorkflowNotReadyFailure``); the next attempt's worker
    answers, so a polled query is asked again."""
    return e.status == RPCStatusCode.FAILED_PRECONDITION and any(
        d.type_url.endswith(".WorkflowNotReadyFailure") for d in e.grpc_status.details
    )


QUERY_RETRIED = frozenset(
    {RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.CANCELLED}
)
"""A polled query is asked again after these: the conversation's worker died or the server was
out of reach; the conversation itself is fine, and a new worker answers."""


def _settle(op: WithStartWorkflowOperation[Any, Any]) -> None:
    """Read the start operation's failure, so that a cancelled or failed update-with-start
    does not also log "Future exception was never retrieved" (temporalio sets the
    operation's handle future with the failure, and only ``op.workflow_handle()`` reads it)."""
    future = getattr(op, "_workflow_handle", None)
    if isinstance(future, asyncio.Future) and future.done() and not future.cancelled():
        future.exception()
