"""``TurnWorkflow``: one chat turn, the step loop (README.md, "How a turn flows").

Deterministic code only. It carries ids and small summaries; everything large lives in the
transcript store and is loaded by the activities. Activities are called by name, so this
module imports none of their code into the sandbox.

Why it is long (about 760 lines): one workflow class whose methods share the turn's
in-flight state (its steps, pending tool calls, the browser's and sub-agents' waits, results
to forward); the helpers that need none of it are module functions at its end.
"""

# No ``from __future__ import annotations`` here: the sandbox re-imports this module for
# every workflow run, and temporalio reads the handlers' type hints each time; evaluated
# annotations spare it compiling each string again (~0.4 ms a module exec, measured
# outside the sandbox).

import asyncio
from collections.abc import Awaitable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_core import to_json
from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from durable_turns.contract import (
        AGENT_CALL_PREFIX,
        BEGIN_TURN,
        COMPACT,
        FAIL_TURN,
        FINISH_TURN,
        INVALID_ID,
        INVALID_REQUEST,
        MAX_TOOL_RESULT_BYTES,
        MODEL_STEP,
        QUERY_STATE,
        TOOL_CALL,
        TURN_MODEL,
        TURN_SIGNAL_AGENT_WAIT,
        TURN_SIGNAL_TOOL_RESULT,
        TURN_STATUS,
        TURN_WORKFLOW,
        UNKNOWN_SIGNAL,
        UNKNOWN_TOOL_CALL,
        WORKER_CRASH_LOOP,
        BeginTurnInput,
        CompactInput,
        CompactResult,
        ErrorInfo,
        FailTurnInput,
        FinishTurnInput,
        ModelStepInput,
        StepSummary,
        StopCondition,
        ToolCallInput,
        ToolCallRef,
        ToolOutcome,
        ToolResolution,
        TurnInput,
        TurnPlan,
        TurnRef,
        TurnResult,
        TurnStatus,
        agent_call_id,
        id_problem,
        metadata_problem,
        model_attribute,
        split_agent_call_id,
    )
    from durable_turns.messages import Usage
    from durable_turns.workflows import options, recovery, subagent
    from durable_turns.workflows.intake import ABSENT, Inbox, Rejected, decode, unfold


T = TypeVar("T")


@workflow.defn(name=TURN_WORKFLOW)
class TurnWorkflow:
    def __init__(self) -> None:
        self._status = "starting"
        self._step = 0
        self._model = ""
        self._usage = Usage()
        self._tools: list[str] = []
        self._pending: dict[str, ToolOutcome] = {}
        self._resolutions: dict[str, ToolResolution] = {}
        self._sizes: dict[str, int] = {}
        """Each resolution's size as it is sent to its tool_call activity."""
        self._held_bytes = 0
        """Resolutions held for calls the turn is not (yet) waiting on."""
        self._rejected: list[str] = []
        self._inbox = Inbox(self._take_tool_result)
        self._awaited_client = False
        self._completed = 0
        """Model steps of the current run that the history says completed."""
        self._stage = "stream"
        """The stage a failure of a local activity (begin, finish) is reported at."""
        self._input: TurnInput | None = None
        self._agent_runs: dict[str, str] = {}
        """The running sub-agents' turns (workflow ids), by their agent call's id."""
        self._agent_waits: dict[str, dict[str, Any]] = {}
        """Their calls that wait for the client, by the id this turn's client sees
        (``agent_call_id``): what the sub-agents said (``agentWait``)."""
        self._forwards: list[tuple[str, dict[str, Any]]] = []
        """Answers to sub-agents' calls on their way to the sub-agent's turn."""
        self._forwarder: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        self._finished: TurnResult | None = None
        """The turn's result, when its last model step finished it (``StepSummary.result``)."""
        self._model_attr: str | None = None
        """``TurnModel``'s value, left for the final upsert (``TurnPlan.lean_upserts``)."""

    @workflow.query(name=QUERY_STATE)
    def state(self) -> dict[str, object]:
        return {
            "status": self._status,
            "step": self._step,
            "model": self._model,
            "usage": self._usage.model_dump(),
            "tool_calls": self._tools,
            "pending_tool_calls": self._own_waits() + list(self._agent_waits.values()),
            "rejected_tool_results": self._rejected[-10:],
        }

    @workflow.signal(name=TURN_SIGNAL_TOOL_RESULT)
    def tool_result(self, raw: RawValue = ABSENT) -> None:
        """A client tool's result or an approval (one object or a list); bad input is noted.

        Kept as it came and read a bounded amount per workflow task (``intake.Inbox``): a
        burst of large lists of results costs many short tasks, not one past the detector."""
        try:
            self._inbox.offer(TURN_SIGNAL_TOOL_RESULT, raw, MAX_TOOL_RESULT_BYTES, "tool result")
        except Rejected as e:
            self._rejected.append(f"{e.type}: {e.message}")
            del self._rejected[:-10]

    @workflow.signal(name=TURN_SIGNAL_AGENT_WAIT)
    def agent_wait(self, raw: RawValue = ABSENT) -> None:
        """A sub-agent's turn of this turn says which of its calls wait for the client
        (``{"child": <its workflow id>, "calls": [{"tool_call_id", "tool_name",
        "waiting_for"}]}``; an empty list: none any more). They are listed as this turn's
        own, under ``agent_call_id``, until answered or the sub-agent ends."""
        try:
            value = decode(raw, MAX_TOOL_RESULT_BYTES, "agent wait")
            child = value["child"]
            calls = [c for c in value["calls"] if isinstance(c, dict)]
        except (Rejected, KeyError, TypeError) as e:
            self._rejected.append(f"malformed agent wait: {e}")
            del self._rejected[:-10]
            return
        agent = next((a for a, c in self._agent_runs.items() if c == child), None)
        if agent is None:
            return  # a sub-agent that ended meanwhile
        for key in [k for k, w in self._agent_waits.items() if w["agent"] == agent]:
            del self._agent_waits[key]
        for call in calls:
            shown = agent_call_id(agent, str(call.get("tool_call_id")))
            self._agent_waits[shown] = {
                "tool_call_id": shown,
                "tool_name": call.get("tool_name"),
                "waiting_for": call.get("waiting_for"),
                "agent": agent,
            }
        if self._input is not None and self._input.agent:  # a sub-agent's sub-agent: pass
            self._background(self._tell_parent(self._waits()))  # it on up

    def _own_waits(self) -> list[dict[str, Any]]:
        """This turn's own calls that wait for the client and have no answer yet."""
        return [
            {"tool_call_id": o.tool_call_id, "tool_name": o.tool_name, "waiting_for": o.pending}
            for o in self._pending.values()
            if o.tool_call_id not in self._resolutions
        ]

    def _waits(self) -> list[dict[str, Any]]:
        """What this turn waits for the client on: its own calls, then its sub-agents'."""
        keys = ("tool_call_id", "tool_name", "waiting_for")
        return self._own_waits() + [{k: w[k] for k in keys} for w in self._agent_waits.values()]

    def _background(self, work: Awaitable[None]) -> None:
        """A signal's follow-up (a handler cannot await), kept until it is done."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @workflow.signal(dynamic=True)
    def any_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """A batch of tool results sent as one signal (``intake.FOLD_PREFIX``), each taken as
        its own signal would have been; or a signal the turn does not take, noted as
        rejected."""
        if unfold(name) == TURN_SIGNAL_TOOL_RESULT:
            for raw in args:
                self.tool_result(raw)
            return
        shown = name[:100] + ("…" if len(name) > 100 else "")
        self._rejected.append(f"{UNKNOWN_SIGNAL}: no signal named {shown!r}")
        del self._rejected[:-10]

    def _take_tool_result(self, _kind: str, raw: RawValue) -> None:
        try:
            value = decode(raw, MAX_TOOL_RESULT_BYTES, "tool result")
        except Rejected as e:
            self._rejected.append(f"{e.type}: {e.message}")
            return
        for item in value if isinstance(value, list) else [value]:
            try:
                resolution = ToolResolution.model_validate(item)
            except ValidationError as e:
                self._rejected.append(f"malformed tool result: {e.errors()[0]['msg']}")
                continue
            call_id = resolution.tool_call_id
            if call_id.startswith(AGENT_CALL_PREFIX):
                self._forward(resolution)
                continue
            if call_id in self._resolutions:
                continue
            size = len(to_json(resolution))
            if call_id not in self._pending:
                if self._held_bytes + size > MAX_HELD_RESOLUTION_BYTES:
                    self._rejected.append(
                        f"QueueFull: {self._held_bytes} bytes of results are held for calls"
                        f" this turn is not waiting on (limit {MAX_HELD_RESOLUTION_BYTES})"
                    )
                    del self._rejected[:-10]
                    continue
                self._held_bytes += size
            self._resolutions[call_id] = resolution
            self._sizes[call_id] = size
        del self._rejected[:-10]

    def _forward(self, resolution: ToolResolution) -> None:
        """An answer to a sub-agent's call: to that sub-agent's turn, under the call's own
        id (a signal, a command of this turn's history: a worker that dies loses nothing).
        One no running sub-agent of this turn has is noted as ``UnknownToolCall``."""
        split = split_agent_call_id(resolution.tool_call_id, self._agent_runs)
        if split is None:
            shown = resolution.tool_call_id[:200]
            self._rejected.append(
                f"{UNKNOWN_TOOL_CALL}: no sub-agent of this turn runs the call {shown!r}"
            )
            return
        agent, child_call = split
        self._agent_waits.pop(resolution.tool_call_id, None)
        if self._input is not None and self._input.agent:
            self._background(self._tell_parent(self._waits()))
        answer = resolution.model_dump(mode="json", exclude_defaults=True)
        answer["tool_call_id"] = child_call
        self._forwards.append((self._agent_runs[agent], answer))
        if self._forwarder is None:
            self._forwarder = asyncio.ensure_future(self._forward_all())

    async def _forward_all(self) -> None:
        try:
            while self._forwards:
                child, answer = self._forwards.pop(0)
                try:
                    handle = workflow.get_external_workflow_handle(child)
                    await handle.signal(TURN_SIGNAL_TOOL_RESULT, answer)
                except Exception as err:  # the sub-agent ended meanwhile: nothing waits
                    workflow.logger.info("answer not forwarded to %s: %s", child, err)
        finally:
            self._forwarder = None

    async def _tell_parent(self, calls: list[dict[str, Any]]) -> None:
        """A sub-agent's turn: tell the parent turn which calls wait for its client (the
        parent lists and forwards them), its sub-agents' too; an empty list: none."""
        parent = workflow.info().parent
        if parent is None:
            return
        try:
            await workflow.get_external_workflow_handle(parent.workflow_id).signal(
                TURN_SIGNAL_AGENT_WAIT, {"child": workflow.info().workflow_id, "calls": calls}
            )
        except Exception as err:  # the parent ended: it cancels this turn too
            workflow.logger.info("parent not told of the wait: %s", err)

    def _refused(self, inp: TurnInput, error_type: str, message: str) -> TurnResult:
        """The result of a turn that will not run at all (its input breaks the rules)."""
        self._status = "error"
        workflow.set_current_details(f"**error** ({error_type}): {message}")
        return TurnResult(
            request_id=inp.request_id,
            conversation_id=inp.conversation_id,
            turn_number=inp.turn_number,
            workflow_id=workflow.info().workflow_id,
            status="error",
            error=ErrorInfo(type=error_type, message=message),
        )

    @workflow.run
    async def run(self, inp: TurnInput) -> TurnResult:
        if workflow.info().parent is None:
            # Started directly with an id no conversation may have, or metadata no
            # conversation accepts: touch nothing.
            if problem := id_problem(inp.conversation_id):
                return self._refused(inp, INVALID_ID, f"invalid conversation id: {problem}")
            if inp.metadata and (problem := metadata_problem(inp.metadata)):
                return self._refused(inp, INVALID_REQUEST, f"invalid metadata: {problem}")
        ref = TurnRef(
            conversation_id=inp.conversation_id,
            turn_number=inp.turn_number,
            request_id=inp.request_id or workflow.info().workflow_id,
            owner=workflow.info().first_execution_run_id,
            by_conversation=getattr(workflow.info().parent, "workflow_id", None)
            == inp.conversation_id,
            agent=inp.agent,
        )
        self._input = inp
        result = await self._run_turn(inp, ref)
        final = [TURN_STATUS.value_set(result.status)]
        if self._model_attr is not None:
            final.append(TURN_MODEL.value_set(self._model_attr))
        workflow.upsert_search_attributes(final)
        workflow.set_current_details(_details(result))
        if (workflow.info().parent is None or inp.agent) and result.respond:
            # Started directly, or a sub-agent's: no conversation runs on_chat_response for us.
            await options.chat_response(result, "on_chat_response", inp.agent)
        return result

    async def _run_turn(self, inp: TurnInput, ref: TurnRef) -> TurnResult:
        steps = 0
        plan: TurnPlan | None = None
        try:
            run = 0
            while True:
                plan = await self._begin(inp, ref, run)
                if plan.skip:
                    self._status = "skipped"
                    return await self._finish(ref, plan, 0, "skipped", inp.continuation)
                steps, overflow = await self._steps(ref, plan)
                if overflow is None:
                    result = await self._finish(
                        ref, plan, steps, "completed", inp.continuation, self._awaited_client
                    )
                    return result.model_copy(update={"auto_continue": self._awaited_client})
                # Context overflow: compact, then re-run the turn from before_turn.
                if run >= plan.overflow_retries:
                    raise ApplicationError(overflow, type="ContextOverflow")
                compacted = await self._compact(ref, plan, "overflow", run)
                if not compacted.shortened:
                    raise ApplicationError(
                        f"{overflow} (compaction did not shorten the context:"
                        f" {compacted.tokens_before} → {compacted.tokens_after} tokens)",
                        type="ContextOverflow",
                    )
                run += 1
        except (asyncio.CancelledError, recovery.Stopped):  # cancelChat, on_chat_recovery
            self._status = "aborted"
            return await self._finish(ref, plan, steps, "aborted", inp.continuation)
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):  # the turn was cancelled mid-activity
                self._status = "aborted"
                return await self._finish(ref, plan, steps, "aborted", inp.continuation)
            # fail_turn keeps only what the history says completed (plus the failing step's
            # partial reply): never a step or a tool call that did not
            return await self._fail(ref, self._completed, inp.continuation, _error_info(err))
        except ApplicationError as err:
            # the workflow's own ContextOverflow or WorkerCrashLoop, or a local activity's failure
            stage = "stream" if err.type == "ContextOverflow" else self._stage
            if err.type == WORKER_CRASH_LOOP and err.details:
                stage = str(err.details[0])
            info = ErrorInfo(type=err.type or "Error", message=err.message, stage=stage)
            if err.type == "ContextOverflow":
                info.classification = "context_overflow"
            return await self._fail(ref, self._completed, inp.continuation, info)

    async def _begin(self, inp: TurnInput, ref: TurnRef, run: int) -> TurnPlan:
        self._status = "beginning"
        self._stage = "turn"
        begin = BeginTurnInput(
            turn=ref,
            new_messages=inp.new_messages,
            continuation=inp.continuation,
            body=inp.body,
            model=inp.model,
            max_steps=inp.max_steps,
            attempt=run,
            regenerate=inp.regenerate,
            metadata=inp.metadata,
        )
        summary = (
            "begin turn"
            + (" (continuation)" if inp.continuation else "")
            + (f" (regenerate {inp.regenerate})"[:200] if inp.regenerate else "")
            + (f" · re-run {run} after compaction" if run else "")
        )
        plan = await self._bookkeeping(BEGIN_TURN, begin, TurnPlan, summary)
        self._stage = "stream"
        if not plan.skip:
            self._model = plan.model
            model_attr = model_attribute(plan.model)
            started = workflow.info().typed_search_attributes.get(TURN_MODEL)
            if not plan.lean_upserts or (started is not None and started != model_attr):
                workflow.upsert_search_attributes([TURN_MODEL.value_set(model_attr)])
            elif started is None:  # set with TurnStatus at the end: one upsert, not two
                self._model_attr = model_attr
        return plan

    async def _steps(self, ref: TurnRef, plan: TurnPlan) -> tuple[int, str | None]:
        """The step loop: (steps taken, the overflow error if a step overflowed)."""
        steps = compactions = self._completed = 0
        last: StepSummary | None = None
        for step in range(plan.max_steps):
            if (
                last is not None
                and plan.compact_at_tokens is not None
                and last.usage.input_tokens >= plan.compact_at_tokens
                and compactions < plan.max_compactions
            ):
                await self._compact(ref, plan, "proactive", compactions, last.usage.input_tokens)
                compactions += 1
            self._step = step
            self._status = f"model step {step}"
            workflow.set_current_details(f"**step {step}** · `{plan.model}` · running")
            last = await self._model_step(ref, plan, step, last)
            if last.outcome == "stopped":
                raise recovery.Stopped
            self._finished = last.result
            steps = self._completed = step + 1
            self._usage += last.usage
            if last.outcome == "context_overflow":
                return steps, last.error or "context overflow"
            if not last.tool_calls:
                break
            # the client's answers arrived: continue in a new turn (a sub-agent has no
            # conversation to run one, so it goes on here)
            if await self._tool_calls(ref, plan, last) and not ref.agent:
                self._awaited_client = True
                break
            if _should_stop(plan.stop_when, last, steps):
                break
        return steps, None

    async def _compact(
        self, ref: TurnRef, plan: TurnPlan, reason: str, number: int, tokens: int = 0
    ) -> CompactResult:
        self._status = f"compacting ({reason})"
        at = f" at {tokens / 1000:.1f}k tokens" if tokens else ""
        inp = CompactInput(turn=ref, model=plan.model, reason=reason, number=number)  # type: ignore[arg-type]

        def attempt(policy: RetryPolicy) -> Awaitable[CompactResult]:
            return workflow.execute_activity(
                COMPACT,
                inp,
                result_type=CompactResult,
                start_to_close_timeout=timedelta(seconds=plan.step_timeout_s),
                heartbeat_timeout=options.heartbeat(plan),
                retry_policy=policy,
                summary=f"compact: {reason}{at}",
            )

        return await options.with_budgets(
            lambda _n, _failed, _last: attempt(options.ONE_ATTEMPT),
            stage=f"compaction ({reason})",
            kind="stream",
            tries=plan.max_retries + 1,
            crash_retries=plan.crash_retries,
            final_types=options.MODEL_FINAL,
        )

    async def _model_step(
        self, ref: TurnRef, plan: TurnPlan, step: int, previous: StepSummary | None
    ) -> StepSummary:
        # The previous step's prompt plus its output is about what this one sends.
        context = previous.usage.input_tokens + previous.usage.output_tokens if previous else 0
        size = f" · {context / 1000:.1f}k tokens in" if context else ""
        used = previous.usage if previous else None  # the previous step's cached share
        if used is not None and used.cached_input_tokens and used.input_tokens:
            size += f" · {used.cached_input_tokens / used.input_tokens:.0%} cached"

        def attempt(inp: ModelStepInput, policy: RetryPolicy) -> Awaitable[StepSummary]:
            return workflow.execute_activity(
                MODEL_STEP,
                inp,
                result_type=StepSummary,
                start_to_close_timeout=timedelta(seconds=plan.step_timeout_s),
                heartbeat_timeout=options.heartbeat(plan),
                retry_policy=policy,
                # on cancelChat, wait for the step to store what it streamed so far
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"model step {step} · {plan.model}{size}",
            )

        # a step that calls no tool ends the turn completed: it may finish it too (its
        # recorded result says whether it did)
        continuation = self._input is not None and self._input.continuation
        finish = FinishTurnInput(
            turn=ref, steps=step + 1, status="completed", continuation=continuation
        )
        seen = recovery.Tracker()
        return await options.with_budgets(
            lambda n, failed, last: attempt(
                ModelStepInput(
                    turn=ref,
                    step=step,
                    model=plan.model,
                    attempt=n,
                    failures=failed,
                    last_try=last,
                    recovery=seen.last,
                    finish=finish,
                ),
                options.ONE_ATTEMPT,
            ),
            stage=f"model step {step}",
            kind="stream",
            tries=plan.max_retries + 1,
            crash_retries=plan.crash_retries,
            final_types=options.MODEL_FINAL,
            on_retry=seen.note,
        )

    async def _tool_calls(self, ref: TurnRef, plan: TurnPlan, summary: StepSummary) -> bool:
        """Run a step's tool calls in parallel; True when some waited on the client."""
        self._status = f"tools of step {summary.step}"
        self._tools.extend(c.tool_name for c in summary.tool_calls)
        outcomes = await asyncio.gather(
            *(self._tool_call(ref, plan, summary.step, c) for c in summary.tool_calls)
        )
        recovery.raise_if_stopped(outcomes)
        pending = [o for o in outcomes if o.pending]
        if not pending:
            return False
        calls = {c.tool_call_id: c for c in summary.tool_calls}
        clients = [o for o in pending if o.pending != "agent"]
        if len(clients) == len(pending):
            await self._wait_for_client(plan, pending)
        else:  # sub-agents run (and the client answers the rest) meanwhile
            agents = [o for o in pending if o.pending == "agent"]
            waits = [self._wait_for_client(plan, clients)] if clients else []
            await asyncio.gather(self._agents(ref, plan, summary.step, agents), *waits)
        # Each answer travels in its activity's input: in batches of at most
        # MAX_ANSWERS_PER_TASK_BYTES per workflow task (one task's completion over gRPC's
        # 4 MiB limit gets the workflow terminated), a short timer between them.
        batches: list[list[ToolOutcome]] = [[]]
        size = 0
        for o in pending:
            answer = self._sizes.get(o.tool_call_id, 0)
            if batches[-1] and size + answer > MAX_ANSWERS_PER_TASK_BYTES:
                batches.append([])
                size = 0
            batches[-1].append(o)
            size += answer
        runs: list[Awaitable[ToolOutcome]] = []
        for i, batch in enumerate(batches):
            if i:
                await workflow.sleep(timedelta(milliseconds=1), summary="next tool answers")
            runs.extend(
                asyncio.ensure_future(
                    self._tool_call(
                        ref,
                        plan,
                        summary.step,
                        calls[o.tool_call_id],
                        self._resolutions[o.tool_call_id],
                    )
                )
                for o in batch
            )
        recovery.raise_if_stopped(await asyncio.gather(*runs))
        return bool(clients)

    async def _agents(
        self, ref: TurnRef, plan: TurnPlan, step: int, agents: list[ToolOutcome]
    ) -> None:
        """Run the sub-agents of a step's agent tool calls, in parallel (``subagent``); each
        one's reply is its call's resolution, whatever a client sent for it."""
        inp = self._input
        assert inp is not None
        if len(agents) == 1:
            self._status = f"sub-agent {agents[0].tool_name}"
        else:
            self._status = f"{len(agents)} sub-agents"
        for o in agents:  # answers to their calls that wait for the client go to them
            self._agent_runs[o.tool_call_id] = subagent.child_turn_id(ref, o.tool_call_id)
        waited = len(self._agent_waits)
        try:
            answers = await asyncio.gather(
                *(subagent.run_agent(ref, plan, step, o, inp.body, inp.metadata) for o in agents)
            )
        finally:
            for o in agents:
                self._agent_runs.pop(o.tool_call_id, None)
            for key in [
                k for k, w in self._agent_waits.items() if w["agent"] not in self._agent_runs
            ]:
                del self._agent_waits[key]
        if inp.agent and waited and not self._agent_waits:  # its sub-agents' waits are gone
            await self._tell_parent(self._waits())
        for answer in answers:
            self._resolutions[answer.tool_call_id] = answer
            self._sizes[answer.tool_call_id] = len(to_json(answer))

    def _tool_call(
        self,
        ref: TurnRef,
        plan: TurnPlan,
        step: int,
        call: ToolCallRef,
        resolution: ToolResolution | None = None,
    ) -> Awaitable[ToolOutcome]:
        # The activity may run as long as the tool's own limit allows, every retry
        # included (the tool's timeout is enforced inside the activity), with a margin.
        limit = plan.tool_timeout_s
        if call.timeout_s is not None:
            limit = max(limit, call.timeout_s * (call.retries + 1) + TOOL_TIMEOUT_MARGIN_S)
        details = "" if resolution else _tool_limits(call)

        seen = recovery.Tracker()

        def attempt(n: int, failed: int, policy: RetryPolicy) -> Awaitable[ToolOutcome]:
            return workflow.execute_activity(
                TOOL_CALL,
                ToolCallInput(
                    turn=ref,
                    step=step,
                    tool_call_id=call.tool_call_id,
                    tool_name=call.tool_name,
                    resolution=resolution,
                    attempt=n,
                    failures=failed,
                    recovery=seen.last,
                ),
                result_type=ToolOutcome,
                start_to_close_timeout=timedelta(seconds=limit),
                heartbeat_timeout=options.heartbeat(plan),
                retry_policy=policy,
                summary=f"tool {call.tool_name}{details}"
                + (" · client's answer" if resolution else ""),
            )

        return options.with_budgets(
            lambda n, failed, _last: attempt(n, failed, options.ONE_ATTEMPT),
            stage=f"tool {call.tool_name}",
            kind="tool",
            tries=options.TOOL_TRIES,
            crash_retries=plan.crash_retries,
            on_retry=seen.note,
        )

    async def _wait_for_client(self, plan: TurnPlan, pending: list[ToolOutcome]) -> None:
        """Wait durably for every pending call's result or approval (a crash loses nothing)."""
        self._pending.update({o.tool_call_id: o for o in pending})
        for o in pending:  # held for a call it now waits on: no longer counted as held
            if o.tool_call_id in self._resolutions:
                self._held_bytes -= self._sizes.get(o.tool_call_id, 0)
        self._status = "waiting for the client"
        workflow.set_current_details(
            "waiting for the client: "
            + ", ".join(f"`{o.tool_name}` ({o.pending})" for o in pending)
        )
        ids = [o.tool_call_id for o in pending]
        agent = bool(self._input and self._input.agent)
        if agent:  # a sub-agent's turn: its parent's client answers, through the parent
            await self._tell_parent(self._waits())
        try:
            await workflow.wait_condition(
                lambda: all(i in self._resolutions for i in ids),
                timeout=timedelta(seconds=plan.client_tool_timeout_s),
                timeout_summary="waiting for client tool results",
            )
        except TimeoutError:
            for o in pending:
                self._resolutions.setdefault(
                    o.tool_call_id,
                    ToolResolution(
                        tool_call_id=o.tool_call_id,
                        output=f"The client sent no result within {plan.client_tool_timeout_s:g}s.",
                        is_error=True,
                        approved=False,
                        reason=f"no answer within {plan.client_tool_timeout_s:g}s",
                    ),
                )
        if agent:  # the wait is over: the parent lists none of these any more
            await self._tell_parent(self._waits())

    async def _finish(
        self,
        ref: TurnRef,
        plan: TurnPlan | None,
        steps: int,
        status: TurnStatus,
        continuation: bool,
        auto_continue: bool = False,
    ) -> TurnResult:
        self._status = status
        self._stage = "persist"
        if status == "completed" and self._finished is not None:  # by its last model step
            return self._finished
        finish = FinishTurnInput(
            turn=ref,
            steps=steps,
            status=status,
            continuation=continuation,
            # only a conversation runs the continuation turn
            auto_continue=auto_continue and ref.by_conversation,
        )
        return await self._bookkeeping(FINISH_TURN, finish, TurnResult, f"finish turn · {status}")

    async def _fail(
        self, ref: TurnRef, steps: int, continuation: bool, error: ErrorInfo
    ) -> TurnResult:
        self._status = "error"
        fail = FailTurnInput(turn=ref, steps=steps, error=error, continuation=continuation)
        return await self._bookkeeping(FAIL_TURN, fail, TurnResult, f"fail turn · {error.type}")

    async def _bookkeeping(self, name: str, arg: Any, result_type: type[T], summary: str) -> T:
        """begin, finish or fail turn: a local activity (it saves the worker a round trip to
        the server, schedule, poll, complete and a new workflow task, on every turn)."""
        return await workflow.execute_local_activity(
            name,
            arg,
            result_type=result_type,
            start_to_close_timeout=options.SHORT,
            retry_policy=options.BOOKKEEPING_RETRY,
            summary=summary,
        )


MAX_ANSWERS_PER_TASK_BYTES = 1024 * 1024
"""Client answers (tool results, approvals) sent to their activities in one workflow task."""

MAX_HELD_RESOLUTION_BYTES = 1024 * 1024
"""Results a turn holds for calls it is not waiting on (they may arrive before the step that
asks for them ends); past it, noted in ``rejected_tool_results`` and dropped."""

TOOL_TIMEOUT_MARGIN_S = 30.0
"""Beyond a tool's own time limit: the activity's bookkeeping around the run."""


def _tool_limits(call: ToolCallRef) -> str:
    """``· timeout 20s · retries 2`` for the activity's summary (nothing for client tools)."""
    if call.timeout_s is None:
        return ""
    text = f" · timeout {call.timeout_s:g}s"
    return text + (f" · retries {call.retries}" if call.retries else "")


_STAGES = {
    BEGIN_TURN: "turn",
    MODEL_STEP: "stream",
    TOOL_CALL: "tool",
    FINISH_TURN: "persist",
}


def _error_info(err: ActivityError) -> ErrorInfo:
    cause = err.cause
    stage = _STAGES.get(err.activity_type, "turn")
    if isinstance(cause, ApplicationError):
        return ErrorInfo(type=cause.type or "ApplicationError", message=cause.message, stage=stage)
    message = str(cause) if cause is not None else str(err)
    return ErrorInfo(
        type=type(cause).__name__ if cause else "ActivityError", message=message, stage=stage
    )


def _should_stop(conditions: list[StopCondition], summary: StepSummary, steps: int) -> bool:
    names = {c.tool_name for c in summary.tool_calls}
    for cond in conditions:
        if cond.kind == "has_tool_call" and cond.tool_name in names:
            return True
        if cond.kind == "step_count_is" and cond.count is not None and steps >= cond.count:
            return True
    return False


def _details(result: TurnResult) -> str:
    lines = [
        f"**{result.status}** · {result.steps} step(s) · {result.usage.input_tokens} tokens in"
    ]
    if result.error:
        lines.append(f"error ({result.error.type}): {result.error.message}")
    if result.metadata:
        lines.append("**metadata**: `" + to_json(result.metadata).decode()[:500] + "`")
    return "\n\n".join(lines)
