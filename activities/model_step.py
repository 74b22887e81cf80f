"""``model_step``: one model call, on_step_finish(prev) → before_step → stream →
repair_tool_call (for calls that do not validate) → persist.

A step whose output is already stored (a retried attempt) is returned without asking the
model again. The stream is transformed, observed by ``on_chunk``, published to the live
chunk stream and watched for stalls (``activities.streaming``). An attempt after a worker
loss or a deploy's hand-over goes on from the text the lost one streamed, when the provider
continues a prefill (``_kept_text``): that text is its first chunk, then the model's rest.

Why it is long (about 600 lines): the one activity that runs a model call, its steps
(the hooks around it, the stream, tool-call repair, persistence) in the order they run; the
stream's accumulation, stall watchdog and heartbeats already live in ``activities.streaming``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_turns.activities import context as ctx_build
from durable_turns.activities import heartbeats, isolation, recovery
from durable_turns.activities.context import request_metadata
from durable_turns.activities.deps import ActivityDeps
from durable_turns.activities.errors import (
    CHUNK_STREAM_UNAVAILABLE,
    EXPECTED,
    INVALID_REQUEST,
    STORE_UNAVAILABLE,
    STREAM_STALLED,
    WORKER_SHUTDOWN,
    provider_failure,
)
from durable_turns.activities.heartbeats import cancelled_by_user, keep_alive
from durable_turns.activities.streaming import StepSnapshot, StreamStalled, consume
from durable_turns.activities.tool_calls import call_problem, clean_text
from durable_turns.contract import MODEL_STEP, ModelStepInput, StepSummary, ToolCallRef, TurnRef
from durable_turns.hooks.types import (
    SAMPLING,
    CacheConfig,
    ChatErrorContext,
    PrepareStepContext,
    StepConfig,
    ToolCallRepairContext,
    TurnConfig,
)
from durable_turns.messages import (
    Message,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningPart,
    StreamPart,
    TextDelta,
    TextPart,
    ToolCallChunk,
    ToolCallPart,
    ToolInputDelta,
    ToolInputStart,
    Usage,
    copied,
)
from durable_turns.models import ModelProvider, ModelRequest, ProviderError
from durable_turns.store import StepRecord, ToolCallRepair, TurnRecord
from durable_turns.streams import ChunkPublisher, StreamUnavailable
from durable_turns.streams.cancel import mark_key
from durable_turns.tools import ToolRegistry
from durable_turns.transforms import (
    UnknownTransform,
    apply_transforms,
    is_builtin,
    resolve_transforms,
)


class ModelStepActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=MODEL_STEP)
    async def model_step(self, inp: ModelStepInput) -> StepSummary:
        """One model call: on_step_finish(prev) → before_step → stream → persist."""
        if (agent := self.deps.of(inp.turn)) is not self.deps:  # a sub-agent's turn
            return await ModelStepActivities(agent).model_step(inp)
        heartbeats.count_attempt(inp.attempt, inp.failures)
        # A cancelChat reaches the step through its cancel mark in the chunk stream
        # (streams.cancel); Temporal's cancellation, at the next heartbeat, is the fallback.
        key = mark_key(inp.turn.conversation_id, inp.turn.request_id)
        with heartbeats.stop_on_mark(self.deps.cancel_watch(inp.turn), key):
            try:
                async with self.deps.recorded_attempt(inp.turn, inp.step):
                    return await self._model_step(inp)
            except asyncio.CancelledError:
                if not heartbeats.stopped_by_mark():
                    raise
                task = asyncio.current_task()
                assert task is not None
                task.uncancel()  # the mark's own cancel: the step ends, the turn aborts
                return StepSummary(step=inp.step, outcome="stopped")

    async def _model_step(self, inp: ModelStepInput) -> StepSummary:
        # Heartbeats from the first line: a slow before_step or on_step_finish, or a first
        # use of a provider (its SDK import), is a live worker, not a dead one; and a
        # cancelChat reaches the step before its stream starts too.
        async with keep_alive(self.deps.stream_beat_every):
            # The turn, its steps and results and the transcript: one store round trip.
            state = await self.deps.turn_state(inp.turn, transcript=True)
            turn, steps, results = state.turn, state.steps, state.results
            stored = next((s for s in steps if s.step == inp.step), None)
            if inp.recovery is not None:  # the attempt before was lost: say so, ask
                decision, partial = await recovery.recover(
                    self.deps, turn, inp.recovery, step=inp.step, ask=stored is None
                )
                if decision == "stop":
                    return await self._stopped(turn, inp, partial)
            if stored is not None:  # a retried attempt: the model is not asked again
                return await self._republish(inp.turn, turn, stored, inp)
            prior = [s for s in steps if s.step < inp.step]
            config = ctx_build.turn_config(turn)
            if prior:
                await self.deps.lifecycle.on_step_finish(
                    ctx_build.step_result(prior[-1], results, turn)
                )
            messages = await ctx_build.step_messages(
                self.deps.store, turn, prior, results, transcript=state.transcript
            )
            inherited = prior[-1].experimental_context if prior else None
            hooked = self.deps.lifecycle.overrides("before_step")
            step_config = await self.deps.lifecycle.before_step(
                PrepareStepContext(
                    steps=[ctx_build.step_result(s, results, turn) for s in prior],
                    step_number=inp.step,
                    model=inp.model,
                    # the hook's own copies: what the store returned is shared
                    messages=copied(messages) if hooked else messages,
                    experimental_context=inherited,
                    request_id=turn.request_id,
                    conversation_id=turn.conversation_id,
                    turn_number=turn.turn_number,
                    body=turn.body,
                    metadata=turn.metadata,
                )
            )  # a StepConfig() when before_step is not overridden
            model = step_config.model or inp.model
            provider, model_name = await self.deps.resolve_async(model)
            request = await self._request(
                model, model_name, config, step_config, messages, turn.conversation_id
            )
            if inp.recovery is not None and inp.recovery.reason in _WORKER_GONE:
                # go on from what the lost attempt streamed
                request.continue_text = await self._kept_text(turn, inp, provider, request, partial)
        result: StepSummary | None = None
        try:
            async with self.deps.publisher(inp.turn, inp.step) as publisher:
                if publisher is not None:
                    if heartbeats.attempt() > 1:  # readers drop what earlier attempts streamed
                        with contextlib.suppress(StreamUnavailable):  # then the step goes on
                            await publisher.reset(heartbeats.attempt(), reason="retry")
                    publisher.open_step(inp.step, {"model": model})
                result = await self._run(
                    turn, inp, model, provider, request, config, step_config, inherited, publisher
                )
                return result
        except StreamUnavailable as e:
            if result is None:  # not from this step's own writes: retried like a crash
                raise ApplicationError(str(e), type=CHUNK_STREAM_UNAVAILABLE) from e
            if result.outcome == "context_overflow":  # nothing saved: the turn recovers
                return result
            return _stream_lost(e, result, inp)

    async def _run(
        self,
        turn: TurnRecord,
        inp: ModelStepInput,
        model: str,
        provider: ModelProvider,
        request: ModelRequest,
        config: TurnConfig,
        step_config: StepConfig,
        inherited: Any,
        publisher: ChunkPublisher | None,
    ) -> StepSummary:
        """Stream the step, save it, and publish its end (``StreamUnavailable`` after the
        step is saved: ``_stream_lost``)."""
        partial = StepSnapshot()
        try:
            snapshot = await self._stream(
                provider, request, config, inp, publisher, partial, turn.metadata
            )
        except ApplicationError as e:
            if partial.parts and _is_final(e, inp):
                # The turn fails with this error: what the last attempt streamed is kept
                # for fail_turn (and so on_chat_error/on_chat_response), marked "error".
                failed = _record(inp.step, turn.run, model, partial)
                failed.finish_reason, failed.raw_finish_reason = "error", "error"
                await self.deps.store.save_step(turn.turn_id, failed, owner=turn.owner)
            raise
        except asyncio.CancelledError:
            if not cancelled_by_user():
                # A worker shutdown, a heartbeat timeout, a lost server: nothing is kept,
                # the step is re-run in full (a stored partial would become the reply).
                _raise_if_shutting_down()
                raise
            if partial.parts:  # cancelChat (or its mark): keep what was streamed so far
                aborted = _record(inp.step, turn.run, model, partial)
                aborted.raw_finish_reason = "aborted"
                await self.deps.store.save_step(turn.turn_id, aborted, owner=turn.owner)
            raise
        if isinstance(snapshot, StepSummary):
            return snapshot
        record = _record(inp.step, turn.run, model, snapshot)
        record.request = request_metadata(model, request)
        record.active_tools = step_config.active_tools
        record.experimental_context = (
            step_config.experimental_context if step_config.sets_context else inherited
        )
        if self.deps.lifecycle.overrides("repair_tool_call") and record.parts:
            async with keep_alive(self.deps.stream_beat_every):
                record.repairs = await self._repair(record, request, turn, inp.step)
        # A store outage here is waited out (PatientStore): the model is not asked again.
        saved = await self.deps.store.save_step(turn.turn_id, record, owner=turn.owner)
        summary = _summary(saved, self.deps.tools)
        if publisher is not None:
            try:
                await publisher.step_finish(_finish_data(summary))
            except StreamUnavailable as e:
                return _stream_lost(e, summary, inp)
        return summary

    async def _kept_text(
        self,
        turn: TurnRecord,
        inp: ModelStepInput,
        provider: ModelProvider,
        request: ModelRequest,
        partial: StepSnapshot,
    ) -> str:
        """What the lost attempt of this step streamed (the user saw it), for this attempt
        to go on from (``ModelRequest.continue_text``): plain text only, without trailing
        white space, and only for a provider that continues a prefill; else "" (the step
        starts again, and its reset takes back what was shown)."""
        if not provider.continues(request):
            return ""
        if not partial.parts:  # read back only when on_chat_recovery was asked
            partial = await recovery.discarded(self.deps, turn, inp.step, heartbeats.attempt())
        if partial.sources or not all(isinstance(p, TextPart) for p in partial.parts):
            return ""  # a reasoning part or a tool call: not a text the model goes on from
        return partial.text.rstrip()

    async def _stopped(
        self, turn: TurnRecord, inp: ModelStepInput, partial: StepSnapshot
    ) -> StepSummary:
        """``on_chat_recovery`` said stop: what the lost attempt streamed is kept as the
        step's aborted output (as a cancelChat keeps it), and the turn ends ``aborted``."""
        if partial.parts:
            aborted = _record(inp.step, turn.run, inp.model, partial)
            aborted.raw_finish_reason = "aborted"
            await self.deps.store.save_step(turn.turn_id, aborted, owner=turn.owner)
        return StepSummary(step=inp.step, outcome="stopped", text_chars=len(partial.text))

    async def _republish(
        self, ref: TurnRef, turn: TurnRecord, stored: StepRecord, inp: ModelStepInput
    ) -> StepSummary:
        """A step an earlier attempt saved: its summary, and on the live stream the whole
        step again (after a reset), for the earlier attempt may have been lost before its
        chunks reached the stream (a hung or broken stream write, a crash after the save).
        Readers drop what the earlier attempts streamed and see the step once."""
        summary = _summary(stored, self.deps.tools)
        attempt = heartbeats.attempt()
        if attempt == 1:  # nothing of this step was streamed by this run
            return summary
        sends_reasoning = ctx_build.turn_config(turn).send_reasoning is not False
        try:
            async with self.deps.publisher(ref, stored.step) as publisher:
                if publisher is not None:
                    await publisher.reset(attempt, reason="retry")
                    publisher.open_step(stored.step, {"model": stored.model})
                    for chunk in replayed_chunks(stored, sends_reasoning):
                        publisher.publish_chunk(chunk)
                    await publisher.step_finish(_finish_data(summary))
        except StreamUnavailable as e:
            return _stream_lost(e, summary, inp)
        return summary

    async def _repair(
        self, record: StepRecord, request: ModelRequest, turn: TurnRecord, step: int
    ) -> dict[str, ToolCallRepair]:
        """Ask ``repair_tool_call`` about each call of the step that does not validate, once,
        and put the repaired call in the step's place: what is stored (and so what the
        transcript and the next step show) is the repaired call, under the model's call id."""
        available = {t.name for t in request.tools}
        repairs: dict[str, ToolCallRepair] = {}
        for i, part in enumerate(record.parts):
            if not isinstance(part, ToolCallPart):
                continue
            found = call_problem(self.deps.tools, available, part.tool_name, part.input)
            if found is None:
                continue
            problem, error = found
            repair = ToolCallRepair(
                tool_name=part.tool_name, input=part.input, problem=problem, error=error
            )
            ctx = ToolCallRepairContext(
                tool_call_id=part.tool_call_id,
                tool_name=part.tool_name,
                input=copy.deepcopy(part.input),
                problem=problem,
                error=error,
                tools=list(request.tools),
                step_number=step,
                messages=copied(request.messages),
                system=request.system,
                request_id=turn.request_id,
                conversation_id=turn.conversation_id,
                turn_number=turn.turn_number,
                body=turn.body,
                metadata=turn.metadata,
            )
            try:
                fixed = await self.deps.lifecycle.repair_tool_call(ctx)
                if fixed is not None:
                    record.parts[i] = ToolCallPart(  # validated: a JSON input only
                        tool_call_id=part.tool_call_id,
                        tool_name=fixed.tool_name or part.tool_name,
                        input=part.input if fixed.input is None else fixed.input,
                        provider_metadata=part.provider_metadata,
                    )
                    repair.repaired = True
            except Exception as e:
                activity.logger.warning(
                    "repair_tool_call raised for tool %s", part.tool_name, exc_info=e
                )
                repair.hook_error = clean_text(f"repair_tool_call raised {type(e).__name__}: {e}")
            repairs[part.tool_call_id] = repair
        return repairs

    async def _request(
        self,
        model: str,
        model_name: str,
        config: TurnConfig,
        step: StepConfig,
        messages: list[Message],
        conversation_id: str,
    ) -> ModelRequest:
        return ModelRequest(
            model=model_name,
            system=step.system if step.system is not None else await self.deps.system(config),
            messages=step.messages if step.messages is not None else messages,
            tools=self.deps.tool_specs(config, step.active_tools, model=model),
            tool_choice=step.tool_choice or config.tool_choice,
            headers=config.headers or {},
            provider_options={**(config.provider_options or {}), **(step.provider_options or {})},
            output_schema=config.output,
            send_reasoning=True,  # the model gets its own reasoning back within a turn
            cached_prompt=(await self.deps.session()).cached_prompt,
            cache=(config.cache or CacheConfig()).merged(step.cache),
            conversation_id=conversation_id,
            attempt=heartbeats.attempt(),
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
        metadata: dict[str, Any],
    ) -> StepSnapshot | StepSummary:
        """The step's stream, transformed, observed and published; a summary for a context
        overflow. With ``send_reasoning`` off, reasoning reaches neither the hooks nor the
        live stream."""
        stream: AsyncIterator[StreamPart] = provider.stream(request)
        lease = None
        if config.experimental_transform:
            try:
                transforms = resolve_transforms(config.experimental_transform)
            except UnknownTransform as e:
                raise ApplicationError(
                    str(e), type=INVALID_REQUEST, non_retryable=True, category=EXPECTED
                ) from e
            if not all(is_builtin(t) for t in transforms):  # the built-ins never block
                lease = isolation.Lease()  # one user loop for the step's transforms
            run = None if lease is None else functools.partial(lease.call, "stream transform")
            stream = apply_transforms(stream, transforms, run)
        if request.continue_text:  # already transformed: the lost attempt published it
            stream = _kept_first(request.continue_text, stream)
        sends_reasoning = config.send_reasoning is not False
        on_chunk = self.deps.lifecycle.chunk_handler(
            inp.step, inp.turn.request_id, sends_reasoning, turn=inp.turn, metadata=metadata
        )
        sink = None if publisher is None else _client_sink(publisher, sends_reasoning)
        # on_chunk runs on a user loop kept for the step, in order; the step waits for it
        stage = None if on_chunk is None else isolation.ChunkStage(on_chunk, "hook on_chunk")
        try:
            done = await consume(
                stream,
                stall_timeout_ms=self.deps.stall_ms(config),
                heartbeat=activity.heartbeat,
                heartbeat_every_s=self.deps.stream_beat_every,
                on_chunk=None if stage is None else stage.push,
                sink=sink,
                snapshot=snapshot,
            )
            if stage is not None:  # the step is alive while its last chunks are observed
                async with keep_alive(self.deps.stream_beat_every):
                    await stage.drain()
            return done
        except StreamStalled as e:
            await self._settle(stage)
            raise ApplicationError(str(e), type=STREAM_STALLED) from e
        except ProviderError as e:
            await self._settle(stage)
            if await self._is_overflow(e, inp.turn, metadata):
                return StepSummary(step=inp.step, outcome="context_overflow", error=str(e))
            raise provider_failure(e) from e
        finally:
            if stage is not None:
                stage.close()
            if lease is not None:
                lease.close()

    async def _settle(self, stage: isolation.ChunkStage | None) -> None:
        """A failed attempt's ``on_chunk`` calls end before the attempt does (at most
        :data:`SETTLE_S`): a hook sees every chunk of an attempt before the next attempt's,
        as readers of the live stream do. A cancelled step drops them instead (``close``)."""
        if stage is None:
            return
        with contextlib.suppress(TimeoutError):
            async with keep_alive(self.deps.stream_beat_every), asyncio.timeout(SETTLE_S):
                await stage.drain()

    async def _is_overflow(
        self, error: ProviderError, ref: TurnRef, metadata: dict[str, Any]
    ) -> bool:
        """Whether a failed step is a context overflow the workflow should recover from."""
        if error.kind == "transient" or not self.deps.hooks.context_overflow.reactive:
            return False
        ctx = ChatErrorContext(
            stage="stream",
            request_id=ref.request_id,
            messages_persisted=True,
            conversation_id=ref.conversation_id,
            turn_number=ref.turn_number,
            metadata=metadata,
        )
        return await self.deps.lifecycle.classify(error, ctx) == "context_overflow"


_WORKER_GONE = ("worker_lost", "worker_shutdown")
"""The recoveries whose next attempt goes on from what the lost one streamed: its worker
died or handed it over mid-stream (a stalled stream or a store outage starts again)."""

SETTLE_S = 10.0
"""How long a failed attempt waits for its ``on_chunk`` calls to see what it streamed."""


def _is_final(error: ApplicationError, inp: ModelStepInput) -> bool:
    """Whether this attempt's failure ends the step: not retryable, or its last attempt."""
    if error.non_retryable:
        return True
    if inp.attempt:  # the workflow counts the attempts (and says which is the last)
        return inp.last_try and error.type not in (WORKER_SHUTDOWN, STORE_UNAVAILABLE)
    policy = activity.info().retry_policy
    most = policy.maximum_attempts if policy is not None else 0
    return most > 0 and activity.info().attempt >= most


def _finish_data(summary: StepSummary) -> dict[str, Any]:
    return {"finish_reason": summary.finish_reason, "usage": summary.usage.model_dump()}


def _stream_lost(
    error: StreamUnavailable, summary: StepSummary, inp: ModelStepInput
) -> StepSummary:
    """A saved step whose end could not be written to the live stream: the attempt fails
    (retryable, ``ChunkStreamUnavailable``) so the next one, perhaps on a worker that reaches
    the stream, writes the saved step again; the last attempt returns the step without it,
    for the transcript has it and the turn goes on."""
    if inp.attempt:  # the workflow counts the attempts (and says which is the last)
        last = inp.last_try
    else:
        policy = activity.info().retry_policy
        most = policy.maximum_attempts if policy is not None else 0
        last = most > 0 and activity.info().attempt >= most
    if not last:
        raise ApplicationError(str(error), type=CHUNK_STREAM_UNAVAILABLE) from error
    activity.logger.warning(
        "%s; step %d goes on without its live stream (its last attempt)", error, summary.step
    )
    return summary


def replayed_chunks(step: StepRecord, sends_reasoning: bool = True) -> list[StreamPart]:
    """A saved step as its stream carried it: its text, reasoning (when sent) and tool calls
    in order, then its sources."""
    out: list[StreamPart] = []
    for part in step.parts:
        if isinstance(part, TextPart):
            if part.text:
                out.append(TextDelta(text=part.text))
        elif isinstance(part, ReasoningPart):
            if sends_reasoning:
                out.append(
                    ReasoningDelta(
                        text=part.text,
                        signature=part.signature,
                        redacted_data=part.redacted_data,
                        provider_metadata=part.provider_metadata,
                    )
                )
                out.append(ReasoningEnd())
        elif isinstance(part, ToolCallPart):
            out.append(ToolInputStart(tool_call_id=part.tool_call_id, tool_name=part.tool_name))
            out.append(ToolInputDelta(tool_call_id=part.tool_call_id, delta=json.dumps(part.input)))
            out.append(
                ToolCallChunk(
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                    input=part.input,
                    provider_metadata=part.provider_metadata,
                )
            )
    out.extend(step.sources)
    return out


async def _kept_first(kept: str, stream: AsyncIterator[StreamPart]) -> AsyncIterator[StreamPart]:
    """A continued step's stream: the kept text as one chunk (published again after the
    reset, and the first text of the stored step), then what the model adds to it."""
    yield TextDelta(text=kept)
    try:
        async for chunk in stream:
            yield chunk
    finally:  # closed with this one (a provider's HTTP response too)
        if isinstance(stream, AsyncGenerator):
            await stream.aclose()


def _raise_if_shutting_down() -> None:
    """A step cut short by its worker's shutdown fails as retryable, to run again elsewhere."""
    details = activity.cancellation_details()
    if details is not None and details.worker_shutdown:
        raise ApplicationError(
            "the worker shut down during this step; it is re-run in full on another worker",
            type=WORKER_SHUTDOWN,
        ) from None


def _client_sink(publisher: ChunkPublisher, sends_reasoning: bool) -> Callable[[StreamPart], None]:
    """What the live stream gets of a step: everything, or everything but reasoning."""
    if sends_reasoning:
        return publisher.publish_chunk

    def publish(chunk: StreamPart) -> None:
        if not isinstance(chunk, ReasoningDelta | ReasoningEnd):
            publisher.publish_chunk(chunk)

    return publish


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
        sources=list(snap.sources),
    )


def _summary(step: StepRecord, tools: ToolRegistry) -> StepSummary:
    return StepSummary(
        step=step.step,
        finish_reason=step.finish_reason,
        tool_calls=[_call_ref(p, tools) for p in step.parts if isinstance(p, ToolCallPart)],
        usage=step.usage,
        text_chars=sum(len(p.text) for p in step.parts if isinstance(p, TextPart)),
    )


def _call_ref(call: ToolCallPart, tools: ToolRegistry) -> ToolCallRef:
    """A tool call as the workflow schedules it: with the tool's own time limit and retries."""
    tool = tools.get(call.tool_name)
    return ToolCallRef(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        timeout_s=tool.timeout_s if tool is not None else None,
        retries=tool.retries if tool is not None else 0,
    )
