"""The activities of a turn: begin, model step, tool call, finish, fail, respond.

One class holds the worker's store, model registry, tools, hooks and settings (injected in
``worker.py``). Every activity takes ids and small deltas, loads what it needs from the
store, calls the hooks of its boundary (through ``Lifecycle``), and writes idempotently,
so a retried attempt never duplicates a message and a stored step is never asked of the
model again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import compaction
from activities import context as ctx_build
from activities.errors import INVALID_MODEL, INVALID_REQUEST, STREAM_STALLED, provider_failure
from activities.lifecycle import Lifecycle, OnChunk
from activities.models import ModelProvider, ModelRegistry, ModelRequest, ProviderError
from activities.store import StepRecord, ToolResultRecord, TranscriptStore, TurnRecord
from activities.streaming import StepSnapshot, StreamStalled, consume
from activities.streams import ChunkPublisher, ChunkStreamBackend
from activities.structured_output import OUTPUT_ERROR, check_output, parse_output
from activities.tool_calls import jsonable, run_tool_call
from activities.transforms import UnknownTransform, apply_transforms, resolve_transforms
from durable_turns.config import Settings
from durable_turns.contract import (
    BeginTurnInput,
    ChatResponseInput,
    CompactInput,
    CompactResult,
    ErrorInfo,
    FailTurnInput,
    FinishTurnInput,
    ModelStepInput,
    StepSummary,
    ToolCallInput,
    ToolCallRef,
    ToolOutcome,
    TurnPlan,
    TurnRef,
    TurnResult,
    model_id_problem,
    turn_id,
    turn_workflow_id,
)
from durable_turns.messages import (
    Message,
    ReasoningDelta,
    ReasoningEnd,
    StreamPart,
    TextPart,
    ToolCallPart,
    ToolResultChunk,
    Usage,
)
from durable_turns.tools import ToolContext, ToolRegistry
from hooks import TurnHooks
from hooks.session import Session
from hooks.types import (
    ChatErrorContext,
    ChatResponseResult,
    PrepareStepContext,
    StepConfig,
    ToolCallContext,
    ToolCallResultContext,
    ToolSpec,
    TurnConfig,
    TurnContext,
)

SAMPLING = (
    "max_output_tokens",
    "temperature",
    "top_p",
    "top_k",
    "presence_penalty",
    "frequency_penalty",
    "stop_sequences",
    "seed",
)
"""TurnConfig fields passed to the provider's request as they are."""


@contextlib.asynccontextmanager
async def keep_alive(every_s: float) -> AsyncIterator[None]:
    """Heartbeat on a timer while a hook or tool runs: the worker is alive, not stuck."""

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(every_s)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()


class TurnActivities:
    def __init__(
        self,
        store: TranscriptStore,
        models: ModelRegistry,
        tools: ToolRegistry,
        hooks: TurnHooks,
        settings: Settings,
        session: Session | Awaitable[Session] | None = None,
        streams: ChunkStreamBackend | None = None,
        extensions: Sequence[Any] | None = None,
    ) -> None:
        """``session``: what ``configure_session`` returned (awaited on first use if it is
        a coroutine); ``streams``: the live chunk stream (None: off); ``extensions``:
        default ``hooks.extensions``."""
        self.store = store
        self.streams = streams
        self.models = models
        self.tools = tools
        self.hooks = hooks
        self.settings = settings
        self.lifecycle = Lifecycle(hooks, extensions)
        self._session: Session | Awaitable[Session] = session if session is not None else Session()
        self._session_lock = asyncio.Lock()

    @property
    def all(self) -> list[Any]:
        """The activity callables, for the worker."""
        return [
            self.open_conversation,
            self.begin_turn,
            self.model_step,
            self.tool_call,
            self.finish_turn,
            self.fail_turn,
            self.chat_response,
            self.compact,
        ]

    @property
    def _beat_every(self) -> float:
        return max(self.settings.heartbeat_timeout_s / 4, 0.05)

    async def session(self) -> Session:
        if not isinstance(self._session, Session):
            async with self._session_lock:
                if not isinstance(self._session, Session):
                    self._session = await self._session
        return self._session

    async def _turn(self, ref: TurnRef) -> TurnRecord:
        turn = await self.store.get_turn(ref.turn_id)
        if turn is None:
            raise ApplicationError(f"turn {ref.turn_id} was never begun", non_retryable=True)
        return turn

    async def _system(self, config: TurnConfig) -> str:
        if config.system is not None:
            return config.system
        return await (await self.session()).system_prompt(self.hooks.system_prompt)

    def _tool_specs(
        self, config: TurnConfig, step_active: list[str] | None = None
    ) -> list[ToolSpec]:
        """Default tools + ``config.tools``, narrowed by the turn's and the step's active tools."""
        names = self.tools.defaults()
        extra: dict[str, ToolSpec] = {}
        for item in config.tools or []:
            if isinstance(item, ToolSpec):
                extra[item.name] = item
            elif item not in names:
                names.append(item)
        specs = {n: t.spec for n in names if (t := self.tools.get(n)) is not None}
        specs.update(extra)
        for active in (config.active_tools, step_active):
            if active is not None:
                specs = {n: s for n, s in specs.items() if n in active}
        return list(specs.values())

    def _resolve(self, model: str) -> tuple[ModelProvider, str]:
        try:
            return self.models.resolve(model)
        except ProviderError as e:
            raise ApplicationError(str(e), type=INVALID_MODEL, non_retryable=True) from e

    # --- conversation ------------------------------------------------------------------

    @activity.defn(name="open_conversation")
    async def open_conversation(self, conversation_id: str) -> int:
        """The last turn number stored for a conversation (0 for a new one)."""
        return await self.store.last_turn_number(conversation_id)

    # --- begin ---------------------------------------------------------------------------

    @activity.defn(name="begin_turn")
    async def begin_turn(self, inp: BeginTurnInput) -> TurnPlan:
        """Persist the user's messages, assemble the context, ask before_turn, record the plan."""
        ref = inp.turn
        model = inp.model or self.settings.model
        async with keep_alive(self._beat_every):
            await self.store.add_messages(ref.conversation_id, inp.new_messages, ref.turn_id)
            turn = TurnRecord(
                turn_id=ref.turn_id,
                conversation_id=ref.conversation_id,
                turn_number=ref.turn_number,
                request_id=ref.request_id,
                continuation=inp.continuation,
                body=inp.body,
                run=inp.attempt,
            )
            await self.store.save_turn(turn)  # from here on, the turn's messages are stored
            if inp.continuation and not await self._can_continue(ref.conversation_id):
                turn.status = "skipped"
                await self.store.save_turn(turn)
                return TurnPlan(model=model, max_steps=0, skip=True)
            await self._compact_after(turn, model)
            config = await self.lifecycle.before_turn(await self._turn_context(turn, model))
        model = config.model or model
        self._check(config, model)
        turn.config = config.model_copy(update={"model": model}).model_dump(
            mode="json", exclude_none=True
        )
        await self.store.save_turn(turn)
        return self._plan(config, model, inp)

    async def _compact_after(self, turn: TurnRecord, model: str) -> None:
        """``compact_after(tokens)``: compact between turns once the context passed it."""
        session = await self.session()
        context = await ctx_build.base_messages(self.store, turn)
        if session.needs_compaction(context):
            await self._store_compaction(
                turn, context, model, f"{turn.turn_id}/compaction-before", "compact_after"
            )

    async def _store_compaction(
        self, turn: TurnRecord, context: list[Message], model: str, summary_id: str, reason: str
    ) -> CompactResult:
        summary, result = await compaction.compact(
            context,
            session=await self.session(),
            models=self.models,
            model=model,
            summary_id=summary_id,
            reason=reason,
        )
        if summary is not None:
            await self.store.add_messages(turn.conversation_id, [summary], turn.turn_id)
        return result

    @activity.defn(name="compact")
    async def compact(self, inp: CompactInput) -> CompactResult:
        """Fold older messages into a summary (the transcript itself is kept whole)."""
        turn = await self._turn(inp.turn)
        async with keep_alive(self._beat_every):
            context = await ctx_build.base_messages(self.store, turn)
            summary_id = f"{turn.turn_id}/compaction-{turn.run}-{inp.reason}-{inp.number}"
            return await self._store_compaction(turn, context, inp.model, summary_id, inp.reason)

    async def _can_continue(self, conversation_id: str) -> bool:
        transcript = [
            m for m in await self.store.messages(conversation_id) if not compaction.is_compaction(m)
        ]
        return bool(transcript) and transcript[-1].role == "assistant"

    async def _turn_context(self, turn: TurnRecord, model: str) -> TurnContext:
        base = TurnConfig()
        return TurnContext(
            system=await self._system(base),
            messages=await ctx_build.base_messages(self.store, turn),
            tools=self._tool_specs(base),
            model=model,
            continuation=turn.continuation,
            body=turn.body,
            request_id=turn.request_id,
            conversation_id=turn.conversation_id,
            turn_number=turn.turn_number,
            is_cancelled=activity.is_cancelled,
        )

    def _check(self, config: TurnConfig, model: str) -> None:
        """Fail the turn now, clearly, on a decision no step could carry out."""
        problem = model_id_problem(model)
        if problem:
            raise ApplicationError(problem, type=INVALID_MODEL, non_retryable=True)
        self._resolve(model)
        try:
            resolve_transforms(config.experimental_transform or [])
        except UnknownTransform as e:
            raise ApplicationError(str(e), type=INVALID_REQUEST, non_retryable=True) from e

    def _plan(self, config: TurnConfig, model: str, inp: BeginTurnInput) -> TurnPlan:
        overflow = self.hooks.context_overflow
        total_ms = config.timeout.total_ms if config.timeout else None
        retries = config.max_retries
        return TurnPlan(
            model=model,
            max_steps=config.max_steps or inp.max_steps or self.settings.max_steps,
            stop_when=config.stop_when or [],
            stall_timeout_ms=self._stall_ms(config),
            max_retries=self.settings.model_retries if retries is None else retries,
            step_timeout_s=total_ms / 1000 if total_ms else self.settings.step_timeout_s,
            heartbeat_timeout_s=self.settings.heartbeat_timeout_s,
            client_tool_timeout_s=self.settings.client_tool_timeout_s,
            overflow_retries=overflow.max_retries if overflow.reactive else 0,
            compact_at_tokens=(
                int(overflow.max_input_tokens * overflow.headroom)
                if overflow.max_input_tokens
                else None
            ),
            max_compactions=max(overflow.max_compactions, 1),
        )

    def _stall_ms(self, config: TurnConfig) -> int:
        """``chat_stream_stall_timeout_ms``, else ``timeout.chunk_ms``, else the worker's."""
        if config.chat_stream_stall_timeout_ms is not None:
            return config.chat_stream_stall_timeout_ms
        if config.timeout and config.timeout.chunk_ms:
            return config.timeout.chunk_ms
        return self.settings.stall_timeout_ms

    # --- model step ------------------------------------------------------------------------

    @activity.defn(name="model_step")
    async def model_step(self, inp: ModelStepInput) -> StepSummary:
        """One model call: on_step_finish(prev) → before_step → stream → persist."""
        turn = await self._turn(inp.turn)
        steps = await self.store.steps(turn.turn_id, turn.run)
        stored = next((s for s in steps if s.step == inp.step), None)
        if stored is not None:  # a retried attempt: the model is not asked again
            return _summary(stored)
        prior = [s for s in steps if s.step < inp.step]
        results = await self.store.tool_results(turn.turn_id)
        config = ctx_build.turn_config(turn)
        if prior:
            await self.lifecycle.on_step_finish(ctx_build.step_result(prior[-1], results))
        messages = await ctx_build.step_messages(self.store, turn, prior, results)
        inherited = prior[-1].experimental_context if prior else None
        step_config = await self.lifecycle.before_step(
            PrepareStepContext(
                steps=[ctx_build.step_result(s, results) for s in prior],
                step_number=inp.step,
                model=inp.model,
                messages=messages,
                experimental_context=inherited,
                request_id=turn.request_id,
                conversation_id=turn.conversation_id,
                turn_number=turn.turn_number,
                body=turn.body,
            )
        )  # a StepConfig() when before_step is not overridden
        model = step_config.model or inp.model
        provider, model_name = self._resolve(model)
        request = await self._request(model_name, config, step_config, messages)
        async with self._publisher(turn.turn_id, inp.step) as publisher:
            if publisher is not None:
                if activity.info().attempt > 1:  # readers drop what earlier attempts streamed
                    await publisher.reset(activity.info().attempt, reason="retry")
                await publisher.step_start(inp.step, {"model": model})
            partial = StepSnapshot()
            try:
                snapshot = await self._stream(provider, request, config, inp, publisher, partial)
            except asyncio.CancelledError:  # cancelChat: keep what was streamed so far
                if partial.parts:
                    aborted = _record(inp.step, turn.run, model, partial)
                    aborted.raw_finish_reason = "aborted"
                    await self.store.save_step(turn.turn_id, aborted)
                raise
            if isinstance(snapshot, StepSummary):
                return snapshot
            record = _record(inp.step, turn.run, model, snapshot)
            record.active_tools = step_config.active_tools
            record.experimental_context = (
                step_config.experimental_context if step_config.sets_context else inherited
            )
            summary = _summary(await self.store.save_step(turn.turn_id, record))
            if publisher is not None:
                await publisher.step_finish(
                    {"finish_reason": summary.finish_reason, "usage": summary.usage.model_dump()}
                )
            return summary

    @contextlib.asynccontextmanager
    async def _publisher(
        self, turn_id: str, step: int | None
    ) -> AsyncIterator[ChunkPublisher | None]:
        """The turn's live chunk stream (None when streaming is off); always flushed."""
        if self.streams is None:
            yield None
            return
        attempt = activity.info().attempt
        async with ChunkPublisher(self.streams, turn_id, step=step, attempt=attempt) as publisher:
            yield publisher

    async def _request(
        self, model_name: str, config: TurnConfig, step: StepConfig, messages: list[Message]
    ) -> ModelRequest:
        return ModelRequest(
            model=model_name,
            system=step.system if step.system is not None else await self._system(config),
            messages=step.messages if step.messages is not None else messages,
            tools=self._tool_specs(config, step.active_tools),
            tool_choice=step.tool_choice or config.tool_choice,
            headers=config.headers or {},
            provider_options={**(config.provider_options or {}), **(step.provider_options or {})},
            output_schema=config.output,
            send_reasoning=True,  # the model gets its own reasoning back within a turn
            cached_prompt=(await self.session()).cached_prompt,
            attempt=activity.info().attempt,
            **{k: getattr(config, k) for k in SAMPLING},
        )

    async def _stream(
        self,
        provider: ModelProvider,
        request: ModelRequest,
        config: TurnConfig,
        inp: ModelStepInput,
        publisher: ChunkPublisher | None,
        snapshot: StepSnapshot,
    ) -> StepSnapshot | StepSummary:
        """The step's stream, transformed, observed and published; a summary for a context
        overflow. With ``send_reasoning`` off, reasoning reaches neither the hooks nor the
        live stream."""
        stream: AsyncIterator[StreamPart] = provider.stream(request)
        if config.experimental_transform:
            try:
                stream = apply_transforms(stream, resolve_transforms(config.experimental_transform))
            except UnknownTransform as e:
                raise ApplicationError(str(e), type=INVALID_REQUEST, non_retryable=True) from e
        sends_reasoning = config.send_reasoning is not False
        on_chunk = self.lifecycle.chunk_handler(inp.step, inp.turn.request_id, sends_reasoning)
        sink = None if publisher is None else _client_sink(publisher, sends_reasoning)
        try:
            return await consume(
                stream,
                stall_timeout_ms=self._stall_ms(config),
                heartbeat=activity.heartbeat,
                heartbeat_every_s=self._beat_every,
                on_chunk=on_chunk,
                sink=sink,
                snapshot=snapshot,
            )
        except StreamStalled as e:
            raise ApplicationError(str(e), type=STREAM_STALLED) from e
        except ProviderError as e:
            if await self._is_overflow(e, inp.turn):
                return StepSummary(step=inp.step, outcome="context_overflow", error=str(e))
            raise provider_failure(e) from e

    async def _is_overflow(self, error: ProviderError, ref: TurnRef) -> bool:
        """Whether a failed step is a context overflow the workflow should recover from."""
        if error.kind == "transient" or not self.hooks.context_overflow.reactive:
            return False
        ctx = ChatErrorContext(stage="stream", request_id=ref.request_id, messages_persisted=True)
        return await self.lifecycle.classify(error, ctx) == "context_overflow"

    # --- tool call -------------------------------------------------------------------------

    @activity.defn(name="tool_call")
    async def tool_call(self, inp: ToolCallInput) -> ToolOutcome:
        """before_tool_call → execute (or block / substitute) → after_tool_call → persist."""
        ref = inp.turn
        stored = (await self.store.tool_results(ref.turn_id)).get(inp.tool_call_id)
        if stored is not None:  # the decision and the result are recorded: never asked again
            return _outcome(stored)
        turn = await self._turn(ref)
        steps = await self.store.steps(turn.turn_id, turn.run)
        step, call = _find_call(steps, inp)
        config = ctx_build.turn_config(turn)
        available = {s.name for s in self._tool_specs(config, step.active_tools)}
        ctx = await self._tool_call_context(turn, steps, inp.step, call)
        on_chunk = self.lifecycle.chunk_handler(inp.step, ref.request_id)
        started = time.monotonic()
        async with keep_alive(self._beat_every):
            run = await run_tool_call(
                self.tools,
                self.lifecycle,
                ctx,
                self._tool_context(turn, inp, step),
                available,
                _preliminaries(on_chunk, call),
                inp.resolution,
            )
            if run.pending:  # recorded nowhere: the turn waits for the client, then asks again
                return ToolOutcome(
                    tool_call_id=call.tool_call_id,
                    tool_name=call.tool_name,
                    success=False,
                    pending=run.pending,  # type: ignore[arg-type]
                )
            duration_ms = (time.monotonic() - started) * 1000
            if on_chunk is not None:
                await on_chunk(_result_chunk(call, run.output, run.is_error))
            await self.lifecycle.after_tool_call(
                ToolCallResultContext(
                    tool_call_id=call.tool_call_id,
                    tool_name=call.tool_name,
                    input=call.input,
                    step_number=inp.step,
                    messages=ctx.messages,
                    duration_ms=duration_ms,
                    success=not run.is_error,
                    output=None if run.is_error else run.output,
                    error=run.output if run.is_error else None,
                    request_id=turn.request_id,
                    conversation_id=turn.conversation_id,
                    turn_number=turn.turn_number,
                    body=turn.body,
                )
            )
        record = ToolResultRecord(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            step=inp.step,
            output=jsonable(run.output),
            is_error=run.is_error,
            blocked=run.blocked,
            duration_ms=duration_ms,
        )
        saved = await self.store.save_tool_result(ref.turn_id, record)
        async with self._publisher(ref.turn_id, inp.step) as publisher:
            if publisher is not None:
                await publisher.tool_result(
                    ctx_build.tool_result_part(saved).model_dump(mode="json")
                )
        return _outcome(saved)

    async def _tool_call_context(
        self, turn: TurnRecord, steps: list[StepRecord], step: int, call: ToolCallPart
    ) -> ToolCallContext:
        wanted = self.lifecycle.overrides("before_tool_call") or self.lifecycle.overrides(
            "after_tool_call"
        )
        messages = await ctx_build.step_messages(self.store, turn, steps, {}) if wanted else []
        return ToolCallContext(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            input=call.input,
            step_number=step,
            messages=messages,
            provider_metadata=call.provider_metadata,
            is_cancelled=activity.is_cancelled,
            request_id=turn.request_id,
            conversation_id=turn.conversation_id,
            turn_number=turn.turn_number,
            body=turn.body,
        )

    def _tool_context(self, turn: TurnRecord, inp: ToolCallInput, step: StepRecord) -> ToolContext:
        return ToolContext(
            tool_call_id=inp.tool_call_id,
            tool_name=inp.tool_name,
            conversation_id=turn.conversation_id,
            turn_number=turn.turn_number,
            request_id=turn.request_id,
            step_number=inp.step,
            attempt=activity.info().attempt,
            heartbeat=activity.heartbeat,
            experimental_context=step.experimental_context,
        )

    # --- finish / fail / respond -------------------------------------------------------------

    @activity.defn(name="finish_turn")
    async def finish_turn(self, inp: FinishTurnInput) -> TurnResult:
        """on_step_finish(last) → check structured output → persist the assistant message."""
        turn = await self._turn(inp.turn)
        steps = await self.store.steps(turn.turn_id, turn.run)
        results = await self.store.tool_results(turn.turn_id)
        if steps and inp.status == "completed":
            last = ctx_build.step_result(steps[-1], results)
            async with keep_alive(self._beat_every):
                await self.lifecycle.on_step_finish(last)
            schema = ctx_build.turn_config(turn).output
            if schema is not None:
                problem = check_output(last.text, schema)
                if problem:
                    error = ErrorInfo(type=OUTPUT_ERROR, message=problem, stage="stream")
                    return await self._failed(turn, steps, results, error, messages_persisted=True)
                result = await self._close(turn, steps, results, inp.status, inp.error)
                return result.model_copy(update={"output": parse_output(last.text)})
        return await self._close(turn, steps, results, inp.status, inp.error)

    @activity.defn(name="fail_turn")
    async def fail_turn(self, inp: FailTurnInput) -> TurnResult:
        """on_chat_error decides what the caller sees; the partial message is persisted first."""
        stored = await self.store.get_turn(inp.turn.turn_id)
        turn = stored or TurnRecord(
            turn_id=inp.turn.turn_id,
            conversation_id=inp.turn.conversation_id,
            turn_number=inp.turn.turn_number,
            request_id=inp.turn.request_id,
            continuation=inp.continuation,
        )
        steps = await self.store.steps(turn.turn_id, turn.run)
        results = await self.store.tool_results(turn.turn_id)
        return await self._failed(
            turn, steps, results, inp.error, messages_persisted=stored is not None
        )

    async def _failed(
        self,
        turn: TurnRecord,
        steps: list[StepRecord],
        results: dict[str, ToolResultRecord],
        error: ErrorInfo,
        messages_persisted: bool,
    ) -> TurnResult:
        message = await self._persist(turn, steps, results, "error")
        ctx = ChatErrorContext(
            stage=error.stage or "turn",  # type: ignore[arg-type]
            request_id=turn.request_id,
            messages_persisted=messages_persisted,
            classification=error.classification,  # type: ignore[arg-type]
        )
        async with keep_alive(self._beat_every):
            shown = await self.lifecycle.on_chat_error(_TurnError(error), ctx)
        return await self._result(
            turn, steps, message, "error", error.model_copy(update={"message": shown})
        )

    async def _close(
        self,
        turn: TurnRecord,
        steps: list[StepRecord],
        results: dict[str, ToolResultRecord],
        status: str,
        error: ErrorInfo | None,
    ) -> TurnResult:
        message = await self._persist(turn, steps, results, status)
        return await self._result(turn, steps, message, status, error)

    async def _persist(
        self,
        turn: TurnRecord,
        steps: list[StepRecord],
        results: dict[str, ToolResultRecord],
        status: str,
    ) -> Message:
        sends_reasoning = ctx_build.turn_config(turn).send_reasoning is not False
        message = ctx_build.assistant_message(turn, steps, results, status, sends_reasoning)
        if message.parts:
            await self.store.put_message(turn.conversation_id, message, turn.turn_id)
        return message

    async def _result(
        self,
        turn: TurnRecord,
        steps: list[StepRecord],
        message: Message,
        status: str,
        error: ErrorInfo | None,
    ) -> TurnResult:
        turn.status = status
        turn.error = error.model_dump() if error else None
        await self.store.save_turn(turn)
        text = ctx_build.message_text(message)
        async with self._publisher(turn.turn_id, None) as publisher:
            if publisher is not None:
                await publisher.turn_finish(
                    status, {"text": text, "error": error.model_dump() if error else None}
                )
        return TurnResult(
            request_id=turn.request_id,
            conversation_id=turn.conversation_id,
            turn_number=turn.turn_number,
            workflow_id=turn_workflow_id(turn.conversation_id, turn.turn_number),
            status=status,  # type: ignore[arg-type]
            text=text,
            message_id=message.id if message.parts else None,
            steps=len(steps),
            continuation=turn.continuation,
            error=error,
            usage=sum((s.usage for s in steps), Usage()),
            respond=self.lifecycle.overrides("on_chat_response"),
        )

    @activity.defn(name="chat_response")
    async def chat_response(self, inp: ChatResponseInput) -> None:
        """on_chat_response, after the message is persisted and the turn lock released."""
        result = inp.result
        if result.status == "skipped" or not self.lifecycle.overrides("on_chat_response"):
            return
        messages = await self.store.messages(result.conversation_id)
        message = next((m for m in messages if m.id == result.message_id), None)
        turn = await self.store.get_turn(turn_id(result.conversation_id, result.turn_number))
        response = ChatResponseResult(
            message=message or Message(id="", role="assistant"),
            request_id=result.request_id,
            continuation=result.continuation,
            status=result.status,
            error=result.error.message if result.error else None,
            conversation_id=result.conversation_id,
            turn_number=result.turn_number,
            body=turn.body if turn else {},
        )
        async with keep_alive(self._beat_every):
            await self.lifecycle.on_chat_response(response)


class _TurnError(Exception):
    """The error ``on_chat_error`` receives: its message, type and stage."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(info.message)
        self.type = info.type
        self.stage = info.stage


def _client_sink(publisher: ChunkPublisher, sends_reasoning: bool) -> Callable[[StreamPart], None]:
    """What the live stream gets of a step: everything, or everything but reasoning."""
    if sends_reasoning:
        return publisher.publish_chunk

    def publish(chunk: StreamPart) -> None:
        if not isinstance(chunk, ReasoningDelta | ReasoningEnd):
            publisher.publish_chunk(chunk)

    return publish


def _find_call(steps: list[StepRecord], inp: ToolCallInput) -> tuple[StepRecord, ToolCallPart]:
    for step in steps:
        if step.step == inp.step:
            for part in step.parts:
                if isinstance(part, ToolCallPart) and part.tool_call_id == inp.tool_call_id:
                    return step, part
    raise ApplicationError(
        f"tool call {inp.tool_call_id} is not in step {inp.step}", non_retryable=True
    )


def _result_chunk(
    call: ToolCallPart, output: Any, is_error: bool, preliminary: bool = False
) -> ToolResultChunk:
    return ToolResultChunk(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        output=jsonable(output),
        is_error=is_error,
        preliminary=preliminary,
    )


def _preliminaries(on_chunk: OnChunk | None, call: ToolCallPart) -> Any:
    """A streaming tool's intermediate values, as preliminary tool-result chunks."""
    if on_chunk is None:
        return None

    async def emit(value: Any) -> None:
        await on_chunk(_result_chunk(call, value, False, preliminary=True))

    return emit


def _record(step: int, run: int, model: str, snap: StepSnapshot) -> StepRecord:
    finish = snap.finish
    return StepRecord(
        step=step,
        run=run,
        parts=[p for p in snap.parts if not (isinstance(p, TextPart) and not p.text)],
        finish_reason=finish.finish_reason if finish else "other",
        raw_finish_reason=finish.raw_finish_reason if finish else None,
        usage=finish.usage if finish else Usage(),
        provider_metadata=finish.provider_metadata if finish else None,
        response=finish.response if finish else {},
        warnings=finish.warnings if finish else [],
        model=model,
    )


def _summary(step: StepRecord) -> StepSummary:
    calls = [p for p in step.parts if isinstance(p, ToolCallPart)]
    return StepSummary(
        step=step.step,
        finish_reason=step.finish_reason,
        tool_calls=[ToolCallRef(tool_call_id=c.tool_call_id, tool_name=c.tool_name) for c in calls],
        usage=step.usage,
        text_chars=sum(len(p.text) for p in step.parts if isinstance(p, TextPart)),
    )


def _outcome(record: ToolResultRecord) -> ToolOutcome:
    return ToolOutcome(
        tool_call_id=record.tool_call_id,
        tool_name=record.tool_name,
        success=not record.is_error,
        blocked=record.blocked,
        error=str(record.output)[:500] if record.is_error else None,
    )
