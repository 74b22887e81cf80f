"""The activities of a turn: begin, model step, tool call, finish, fail, respond.

One class holds the worker's store, model registry, tools, hooks and settings (injected in
``worker.py``). Every activity takes ids and small deltas, loads what it needs from the
store, calls the hooks of its boundary, and writes idempotently, so a retried attempt
never duplicates a message and a stored step is never asked of the model again.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import context as ctx_build
from activities.errors import INVALID_MODEL, STREAM_STALLED, hook_failure, provider_failure
from activities.models import ModelRegistry, ModelRequest, ProviderError
from activities.store import StepRecord, ToolResultRecord, TranscriptStore, TurnRecord
from activities.streaming import StepSnapshot, StreamStalled, consume
from activities.streams import ChunkPublisher, ChunkStreamBackend
from durable_turns.config import Settings
from durable_turns.contract import (
    BeginTurnInput,
    ChatResponseInput,
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
    turn_workflow_id,
)
from durable_turns.messages import Message, StreamPart, TextPart, ToolCallPart, Usage
from durable_turns.tools import Tool, ToolContext, ToolRegistry
from hooks import TurnHooks
from hooks.base import overrides
from hooks.session import Session
from hooks.types import (
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    PrepareStepContext,
    StepConfig,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    ToolSpec,
    TurnConfig,
    TurnContext,
)

T = TypeVar("T")

INTERRUPTED = "The tool call was interrupted before a result was recorded."


async def call_hook(value: T | Awaitable[T]) -> T:
    """Hooks may be sync or async: await what needs awaiting."""
    if inspect.isawaitable(value):
        return await value
    return value


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


def jsonable(value: Any) -> Any:
    """A tool's output as JSON (pydantic models dumped, anything else stringified)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


class TurnActivities:
    def __init__(
        self,
        store: TranscriptStore,
        models: ModelRegistry,
        tools: ToolRegistry,
        hooks: TurnHooks,
        settings: Settings,
        session: Session | None = None,
        streams: ChunkStreamBackend | None = None,
    ) -> None:
        self.store = store
        self.streams = streams
        self.models = models
        self.tools = tools
        self.hooks = hooks
        self.settings = settings
        self.session = session if session is not None else Session()
        self._on_chunk = overrides(hooks, "on_chunk")

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
        ]

    @property
    def _beat_every(self) -> float:
        return max(self.settings.heartbeat_timeout_s / 4, 0.05)

    async def _turn(self, ref: TurnRef) -> TurnRecord:
        turn = await self.store.get_turn(ref.turn_id)
        if turn is None:
            raise ApplicationError(f"turn {ref.turn_id} was never begun", non_retryable=True)
        return turn

    async def _system(self, config: TurnConfig) -> str:
        if config.system is not None:
            return config.system
        return await self.session.system_prompt(self.hooks.system_prompt)

    def _tool_specs(self, config: TurnConfig, step: StepConfig | None = None) -> list[ToolSpec]:
        names = self.tools.defaults()
        extra: dict[str, ToolSpec] = {}
        for item in config.tools or []:
            if isinstance(item, ToolSpec):
                extra[item.name] = item
            elif item not in names:
                names.append(item)
        specs: dict[str, ToolSpec] = {}
        for name in names:
            t = self.tools.get(name)
            if t is not None:
                specs[name] = t.spec
        specs.update(extra)
        for active in (config.active_tools, step.active_tools if step else None):
            if active is not None:
                specs = {n: s for n, s in specs.items() if n in active}
        return list(specs.values())

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
        async with keep_alive(self._beat_every):
            await self.store.add_messages(ref.conversation_id, inp.new_messages, ref.turn_id)
            transcript = await self.store.messages(ref.conversation_id)
            model = inp.model or self.settings.model
            turn = TurnRecord(
                turn_id=ref.turn_id,
                conversation_id=ref.conversation_id,
                turn_number=ref.turn_number,
                request_id=ref.request_id,
                continuation=inp.continuation,
                body=inp.body,
                run=inp.attempt,
            )
            if inp.continuation and (not transcript or transcript[-1].role != "assistant"):
                turn.status = "skipped"
                await self.store.save_turn(turn)
                return TurnPlan(model=model, max_steps=0, skip=True)

            base = TurnConfig()
            messages = await ctx_build.base_messages(self.store, turn)
            context = TurnContext(
                system=await self._system(base),
                messages=messages,
                tools=self._tool_specs(base),
                model=model,
                continuation=inp.continuation,
                body=inp.body,
                request_id=ref.request_id,
                conversation_id=ref.conversation_id,
                turn_number=ref.turn_number,
                is_cancelled=activity.is_cancelled,
            )
            try:
                returned = await call_hook(self.hooks.before_turn(context))
                config = TurnConfig.model_validate(returned or {})
            except (ValidationError, TypeError) as e:
                raise hook_failure("before_turn", e) from e
            except Exception as e:
                raise hook_failure("before_turn", e) from e

        model = config.model or model
        try:
            self.models.resolve(model)
        except ProviderError as e:
            raise ApplicationError(str(e), type=INVALID_MODEL, non_retryable=True) from e
        max_steps = config.max_steps or inp.max_steps or self.settings.max_steps
        stall = config.chat_stream_stall_timeout_ms
        if stall is None and config.timeout and config.timeout.chunk_ms:
            stall = config.timeout.chunk_ms
        step_timeout = self.settings.step_timeout_s
        if config.timeout and config.timeout.total_ms:
            step_timeout = config.timeout.total_ms / 1000
        turn.config = config.model_copy(update={"model": model}).model_dump(
            mode="json", exclude_none=True
        )
        await self.store.save_turn(turn)
        return TurnPlan(
            model=model,
            max_steps=max_steps,
            stop_when=config.stop_when or [],
            stall_timeout_ms=self.settings.stall_timeout_ms if stall is None else stall,
            max_retries=(
                config.max_retries if config.max_retries is not None else self.settings.model_retries
            ),
            step_timeout_s=step_timeout,
            heartbeat_timeout_s=self.settings.heartbeat_timeout_s,
        )

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
        config = TurnConfig.model_validate(turn.config)

        if prior and overrides(self.hooks, "on_step_finish"):
            try:
                await call_hook(self.hooks.on_step_finish(ctx_build.step_result(prior[-1], results)))
            except Exception as e:
                raise hook_failure("on_step_finish", e) from e

        messages = await ctx_build.step_messages(self.store, turn, prior, results)
        model = inp.model
        step_config = StepConfig()
        if overrides(self.hooks, "before_step"):
            prepare = PrepareStepContext(
                steps=[ctx_build.step_result(s, results) for s in prior],
                step_number=inp.step,
                model=model,
                messages=messages,
            )
            try:
                step_config = StepConfig.model_validate(
                    await call_hook(self.hooks.before_step(prepare)) or {}
                )
            except Exception as e:
                raise hook_failure("before_step", e) from e
        model = step_config.model or model
        try:
            provider, model_name = self.models.resolve(model)
        except ProviderError as e:
            raise ApplicationError(str(e), type=INVALID_MODEL, non_retryable=True) from e

        request = ModelRequest(
            model=model_name,
            system=step_config.system if step_config.system is not None else await self._system(config),
            messages=step_config.messages if step_config.messages is not None else messages,
            tools=self._tool_specs(config, step_config),
            tool_choice=step_config.tool_choice or config.tool_choice,
            max_output_tokens=config.max_output_tokens,
            temperature=config.temperature,
            top_p=config.top_p,
            top_k=config.top_k,
            presence_penalty=config.presence_penalty,
            frequency_penalty=config.frequency_penalty,
            stop_sequences=config.stop_sequences,
            seed=config.seed,
            headers=config.headers or {},
            provider_options={**(config.provider_options or {}), **(step_config.provider_options or {})},
            output_schema=config.output,
            send_reasoning=config.send_reasoning if config.send_reasoning is not None else True,
            cached_prompt=self.session.cached_prompt,
            attempt=activity.info().attempt,
        )
        stall_ms = config.chat_stream_stall_timeout_ms
        if stall_ms is None:
            stall_ms = (config.timeout.chunk_ms if config.timeout else None) or self.settings.stall_timeout_ms

        on_chunk = self._chunk_callback(inp) if self._on_chunk else None
        async with self._publisher(turn.turn_id, inp.step) as publisher:
            if publisher is not None:
                if activity.info().attempt > 1:  # readers drop what earlier attempts streamed
                    await publisher.reset(activity.info().attempt, reason="retry")
                await publisher.step_start(inp.step, {"model": model})
            try:
                snapshot = await consume(
                    provider.stream(request),
                    stall_timeout_ms=stall_ms,
                    heartbeat=activity.heartbeat,
                    heartbeat_every_s=self._beat_every,
                    on_chunk=on_chunk,
                    sink=publisher.publish_chunk if publisher is not None else None,
                )
            except StreamStalled as e:
                raise ApplicationError(str(e), type=STREAM_STALLED) from e
            except ProviderError as e:
                overflow = self._classify(e, inp.turn)
                if overflow:
                    return StepSummary(step=inp.step, outcome="context_overflow", error=str(e))
                raise provider_failure(e) from e

            record = _record(inp.step, turn.run, model, snapshot)
            summary = _summary(await self.store.save_step(turn.turn_id, record))
            if publisher is not None:
                await publisher.step_finish(
                    {"finish_reason": summary.finish_reason, "usage": summary.usage.model_dump()}
                )
            return summary

    @contextlib.asynccontextmanager
    async def _publisher(self, turn_id: str, step: int | None) -> AsyncIterator[ChunkPublisher | None]:
        """The turn's live chunk stream (None when streaming is off); always flushed."""
        if self.streams is None:
            yield None
            return
        attempt = activity.info().attempt
        async with ChunkPublisher(self.streams, turn_id, step=step, attempt=attempt) as publisher:
            yield publisher

    def _chunk_callback(self, inp: ModelStepInput):  # type: ignore[no-untyped-def]
        hooks, step, request_id = self.hooks, inp.step, inp.turn.request_id

        async def on_chunk(chunk: StreamPart) -> None:
            try:
                await call_hook(hooks.on_chunk(ChunkContext(chunk, step, request_id)))
            except Exception as e:
                activity.logger.warning("on_chunk raised %r (ignored: it is observational)", e)

        return on_chunk

    def _classify(self, error: ProviderError, ref: TurnRef) -> bool:
        """Whether a failed step is a context overflow the workflow should recover from."""
        if error.kind == "transient" or not self.hooks.context_overflow.reactive:
            return False
        ctx = ChatErrorContext(stage="stream", request_id=ref.request_id, messages_persisted=True)
        try:
            return self.hooks.classify_chat_error(error, ctx) == "context_overflow"
        except Exception as e:  # a classifier that raises is treated as "not an overflow"
            activity.logger.warning("classify_chat_error raised %r", e)
            return False

    # --- tool call -------------------------------------------------------------------------

    @activity.defn(name="tool_call")
    async def tool_call(self, inp: ToolCallInput) -> ToolOutcome:
        """before_tool_call → execute (or block / substitute) → after_tool_call → persist."""
        ref = inp.turn
        stored = (await self.store.tool_results(ref.turn_id)).get(inp.tool_call_id)
        if stored is not None:
            return _outcome(stored)
        turn = await self._turn(ref)
        steps = await self.store.steps(turn.turn_id, turn.run)
        step = next((s for s in steps if s.step == inp.step), None)
        call = next(
            (p for p in (step.parts if step else []) if isinstance(p, ToolCallPart) and p.tool_call_id == inp.tool_call_id),
            None,
        )
        if call is None:
            raise ApplicationError(f"tool call {inp.tool_call_id} is not in step {inp.step}", non_retryable=True)
        config = TurnConfig.model_validate(turn.config)
        available = {s.name for s in self._tool_specs(config)}
        started = time.monotonic()
        async with keep_alive(self._beat_every):
            output, is_error, blocked = await self._run_tool(turn, inp, call, available)
            duration_ms = (time.monotonic() - started) * 1000
            if overrides(self.hooks, "after_tool_call"):
                messages = await ctx_build.step_messages(self.store, turn, steps, {})
                result_ctx = ToolCallResultContext(
                    tool_call_id=call.tool_call_id,
                    tool_name=call.tool_name,
                    input=call.input,
                    step_number=inp.step,
                    messages=messages,
                    duration_ms=duration_ms,
                    success=not is_error,
                    output=None if is_error else output,
                    error=output if is_error else None,
                )
                try:
                    await call_hook(self.hooks.after_tool_call(result_ctx))
                except Exception as e:
                    activity.logger.warning("after_tool_call raised %r (the result is kept)", e)
        record = ToolResultRecord(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            step=inp.step,
            output=jsonable(output),
            is_error=is_error,
            blocked=blocked,
            duration_ms=duration_ms,
        )
        saved = await self.store.save_tool_result(ref.turn_id, record)
        async with self._publisher(ref.turn_id, inp.step) as publisher:
            if publisher is not None:
                await publisher.tool_result(ctx_build.tool_result_part(saved).model_dump(mode="json"))
        return _outcome(saved)

    async def _run_tool(
        self, turn: TurnRecord, inp: ToolCallInput, call: ToolCallPart, available: set[str]
    ) -> tuple[Any, bool, bool]:
        """(output, is_error, blocked) for one call."""
        tool = self.tools.get(call.tool_name)
        if tool is None or call.tool_name not in available:
            names = ", ".join(sorted(available)) or "none"
            return f'Unknown tool "{call.tool_name}". Available tools: {names}.', True, False
        if tool.is_client_tool:
            return f'Tool "{call.tool_name}" runs on the client, which sent no result.', True, False
        try:
            args = tool.input_model.model_validate(call.input)
        except ValidationError as e:
            return _invalid_args(tool, e), True, False
        attempt = activity.info().attempt
        if attempt > 1 and not tool.retry_safe:
            return INTERRUPTED, True, False

        decision: ToolCallDecision | None = None
        if overrides(self.hooks, "before_tool_call"):
            messages = await ctx_build.step_messages(
                self.store, turn, await self.store.steps(turn.turn_id, turn.run), {}
            )
            tool_ctx = ToolCallContext(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                input=call.input,
                step_number=inp.step,
                messages=messages,
                provider_metadata=call.provider_metadata,
                is_cancelled=activity.is_cancelled,
            )
            try:
                decision = await call_hook(self.hooks.before_tool_call(tool_ctx))
                if decision is not None and not isinstance(decision, ToolCallDecision):
                    decision = ToolCallDecision.model_validate(decision)
            except Exception as e:
                return f"before_tool_call raised {type(e).__name__}: {e}", True, False
        if decision is not None:
            if decision.action == "block":
                return decision.reason or f'Tool "{call.tool_name}" was blocked by beforeToolCall.', False, True
            if decision.action == "substitute":
                return decision.output, False, True
            if decision.input is not None:
                try:
                    args = tool.input_model.model_validate(decision.input)
                except ValidationError as e:
                    return "before_tool_call substituted invalid input: " + _invalid_args(tool, e), True, False

        tool_ctx_run = ToolContext(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            conversation_id=turn.conversation_id,
            turn_number=turn.turn_number,
            request_id=turn.request_id,
            step_number=inp.step,
            attempt=attempt,
            heartbeat=activity.heartbeat,
        )
        try:
            return await _execute(tool, args, tool_ctx_run), False, False
        except asyncio.CancelledError:
            raise
        except Exception as e:
            return f"{type(e).__name__}: {e}", True, False

    # --- finish / fail / respond -------------------------------------------------------------

    @activity.defn(name="finish_turn")
    async def finish_turn(self, inp: FinishTurnInput) -> TurnResult:
        """on_step_finish(last) → persist the assistant message → the turn's result."""
        turn = await self._turn(inp.turn)
        steps = await self.store.steps(turn.turn_id, turn.run)
        results = await self.store.tool_results(turn.turn_id)
        if steps and inp.status == "completed" and overrides(self.hooks, "on_step_finish"):
            async with keep_alive(self._beat_every):
                try:
                    await call_hook(self.hooks.on_step_finish(ctx_build.step_result(steps[-1], results)))
                except Exception as e:
                    raise hook_failure("on_step_finish", e) from e
        return await self._close(turn, steps, results, inp.status, inp.error)

    @activity.defn(name="fail_turn")
    async def fail_turn(self, inp: FailTurnInput) -> TurnResult:
        """on_chat_error decides what the caller sees; the partial message is persisted."""
        turn = await self.store.get_turn(inp.turn.turn_id)
        if turn is None:  # failed before begin_turn recorded it
            turn = TurnRecord(
                turn_id=inp.turn.turn_id,
                conversation_id=inp.turn.conversation_id,
                turn_number=inp.turn.turn_number,
                request_id=inp.turn.request_id,
                continuation=inp.continuation,
            )
        steps = await self.store.steps(turn.turn_id, turn.run)
        results = await self.store.tool_results(turn.turn_id)
        error = inp.error
        ctx = ChatErrorContext(
            stage=error.stage or "turn",  # type: ignore[arg-type]
            request_id=turn.request_id,
            messages_persisted=bool(await self.store.messages(turn.conversation_id)),
            classification=error.classification,  # type: ignore[arg-type]
        )
        try:
            shown = await call_hook(self.hooks.on_chat_error(_TurnError(error), ctx))
            message = str(shown) if shown is not None else error.message
        except Exception as e:
            activity.logger.warning("on_chat_error raised %r; the original error is shown", e)
            message = error.message
        return await self._close(turn, steps, results, "error", error.model_copy(update={"message": message}))

    async def _close(
        self,
        turn: TurnRecord,
        steps: list[StepRecord],
        results: dict[str, ToolResultRecord],
        status: str,
        error: ErrorInfo | None,
    ) -> TurnResult:
        message = ctx_build.assistant_message(turn, steps, results, status=status)
        if message.parts:
            await self.store.put_message(turn.conversation_id, message, turn.turn_id)
        turn.status = status
        turn.error = error.model_dump() if error else None
        await self.store.save_turn(turn)
        usage = sum((s.usage for s in steps), Usage())
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
            usage=usage,
        )

    @activity.defn(name="chat_response")
    async def chat_response(self, inp: ChatResponseInput) -> None:
        """on_chat_response, after the message is persisted and the turn lock released."""
        result = inp.result
        if result.status == "skipped" or not overrides(self.hooks, "on_chat_response"):
            return
        messages = await self.store.messages(result.conversation_id)
        message = next((m for m in messages if m.id == result.message_id), None)
        if message is None:
            message = Message(id="", role="assistant")
        response = ChatResponseResult(
            message=message,
            request_id=result.request_id,
            continuation=result.continuation,
            status=result.status,  # type: ignore[arg-type]
            error=result.error.message if result.error else None,
            conversation_id=result.conversation_id,
            turn_number=result.turn_number,
        )
        async with keep_alive(self._beat_every):
            try:
                await call_hook(self.hooks.on_chat_response(response))
            except Exception as e:
                activity.logger.warning("on_chat_response raised %r (the turn stands)", e)


class _TurnError(Exception):
    """The error ``on_chat_error`` receives: its message, type and stage."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(info.message)
        self.type = info.type
        self.stage = info.stage


async def _execute(tool: Tool, args: BaseModel, ctx: ToolContext) -> Any:
    assert tool.fn is not None
    kwargs = tool.call_args(args, ctx)
    if tool.streaming:
        last: Any = None
        async for value in tool.fn(**kwargs):
            last = value
            ctx.heartbeat()
        return last
    return await tool.fn(**kwargs)


def _invalid_args(tool: Tool, error: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(x) for x in e['loc']) or 'input'}: {e['msg']}" for e in error.errors()
    )
    return f'Invalid arguments for tool "{tool.name}": {problems}'


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
