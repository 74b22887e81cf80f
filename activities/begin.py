"""``begin_turn``: persist the user's messages (a regeneration: mark the reply it replaces
superseded), ask ``before_turn``, record the turn's plan."""

from __future__ import annotations

import copy

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_turns.activities import compaction, recovery, regenerate
from durable_turns.activities import context as ctx_build
from durable_turns.activities.compact import store_compaction
from durable_turns.activities.deps import ActivityDeps
from durable_turns.activities.errors import EXPECTED, INVALID_MODEL, INVALID_REQUEST, taken_over
from durable_turns.activities.heartbeats import keep_alive
from durable_turns.contract import BEGIN_TURN, BeginTurnInput, TurnPlan, model_id_problem
from durable_turns.hooks.types import TurnConfig, TurnContext
from durable_turns.messages import Message, copied
from durable_turns.store import TurnRecord
from durable_turns.transforms import UnknownTransform, resolve_transforms


class BeginActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=BEGIN_TURN)
    async def begin_turn(self, inp: BeginTurnInput) -> TurnPlan:
        """Persist the user's messages, assemble the context, ask before_turn, record the plan."""
        if (agent := self.deps.of(inp.turn)) is not self.deps:  # a sub-agent's turn
            return await BeginActivities(agent).begin_turn(inp)
        deps, ref = self.deps, inp.turn
        model = inp.model or deps.settings.model
        async with keep_alive(deps.beat_every):
            turn = TurnRecord(
                turn_id=ref.turn_id,
                conversation_id=ref.conversation_id,
                turn_number=ref.turn_number,
                request_id=ref.request_id,
                continuation=inp.continuation,
                body=inp.body,
                metadata=inp.metadata,
                run=inp.attempt,
                owner=ref.owner,
                by_conversation=ref.by_conversation,
                running=f"begin:{inp.attempt}",
            )
            # The turn is this run's from here on: what another run stored under its id is
            # deleted first, never reused; a conversation's turn is never taken by a run
            # started elsewhere (which then writes nothing, not even its messages).
            claimed = await deps.store.claim_turn(turn)
            if claimed is None:
                raise taken_over(ref.turn_id, "it is its conversation's turn")
            # The claim counted an earlier attempt of this begin that never ended: its worker
            # died (in before_turn, a compaction…). The user's messages are kept either way.
            turn.crashes = claimed.crashes
            await deps.store.add_messages(
                ref.conversation_id, inp.new_messages, ref.turn_id, owner=ref.owner
            )
            deps.check_crashes(turn, "begin turn (before_turn)")
            await recovery.bookkeeping(deps, turn, "turn", "begin turn")
            # The transcript is read once here (again only after a compaction changed it).
            transcript = await deps.store.messages(ref.conversation_id)
            if inp.regenerate is not None:
                marked = await regenerate.supersede(deps.store, ref, inp.regenerate, transcript)
                turn.regenerates = marked[0]
                gone = set(marked)
                transcript = [m for m in transcript if m.id not in gone]
            if inp.continuation:
                last = _last_role(transcript)
                if last not in ("assistant", "user"):  # nothing to continue nor answer
                    turn.status, turn.running = "skipped", None
                    await deps.store.save_turn(turn)
                    return TurnPlan(model=model, max_steps=0, skip=True)
                if last == "user":  # a turn failed before replying: answer the message
                    turn.continuation = False
            if await self._compact_after(turn, model, transcript):
                transcript = await deps.store.messages(ref.conversation_id)
            context = await ctx_build.base_messages(
                deps.store, turn, truncate=True, transcript=transcript
            )
            config = await deps.lifecycle.before_turn(
                await self._turn_context(turn, model, context)
            )
        model = config.model or model
        await self._check(config, model)
        turn.config = config.model_copy(update={"model": model}).model_dump(
            mode="json", exclude_none=True
        )
        turn.running = None
        await deps.store.save_turn(turn)
        return self._plan(config, model, inp)

    async def _compact_after(self, turn: TurnRecord, model: str, transcript: list[Message]) -> bool:
        """``compact_after(tokens)``: compact between turns once the context passed it.
        Whether it did (and so changed the transcript)."""
        session = await self.deps.session()
        context = await ctx_build.base_messages(self.deps.store, turn, transcript=transcript)
        if not session.needs_compaction(context):
            return False
        await store_compaction(
            self.deps,
            turn,
            context,
            model,
            f"{turn.turn_id}/compaction-before",
            "compact_after",
        )
        return True

    async def _turn_context(
        self, turn: TurnRecord, model: str, messages: list[Message]
    ) -> TurnContext:
        base = TurnConfig()
        return TurnContext(
            system=await self.deps.system(base),
            messages=copied(messages) if self.deps.lifecycle.overrides("before_turn") else messages,
            tools=self.deps.tool_specs(base, model=model),
            model=model,
            continuation=turn.continuation,
            body=turn.body,
            request_id=turn.request_id,
            conversation_id=turn.conversation_id,
            turn_number=turn.turn_number,
            is_cancelled=activity.is_cancelled,
            metadata=copy.deepcopy(turn.metadata),  # the record is saved after the hook
        )

    async def _check(self, config: TurnConfig, model: str) -> None:
        """Fail the turn now, clearly, on a decision no step could carry out."""
        problem = model_id_problem(model)
        if problem:
            raise ApplicationError(
                problem, type=INVALID_MODEL, non_retryable=True, category=EXPECTED
            )
        async with keep_alive(self.deps.beat_every):
            await self.deps.resolve_async(model)
        try:
            resolve_transforms(config.experimental_transform or [])
        except UnknownTransform as e:
            raise ApplicationError(
                str(e), type=INVALID_REQUEST, non_retryable=True, category=EXPECTED
            ) from e

    def _plan(self, config: TurnConfig, model: str, inp: BeginTurnInput) -> TurnPlan:
        settings = self.deps.settings
        overflow = self.deps.hooks.context_overflow
        total_ms = config.timeout.total_ms if config.timeout else None
        retries = config.max_retries
        return TurnPlan(
            model=model,
            max_steps=config.max_steps or inp.max_steps or settings.max_steps,
            stop_when=config.stop_when or [],
            stall_timeout_ms=self.deps.stall_ms(config),
            max_retries=settings.model_retries if retries is None else retries,
            step_timeout_s=total_ms / 1000 if total_ms else settings.step_timeout_s,
            heartbeat_timeout_s=settings.heartbeat_timeout_s,
            client_tool_timeout_s=settings.client_tool_timeout_s,
            overflow_retries=overflow.max_retries if overflow.reactive else 0,
            compact_at_tokens=(
                int(overflow.max_input_tokens * overflow.headroom)
                if overflow.max_input_tokens
                else None
            ),
            max_compactions=max(overflow.max_compactions, 1),
            crash_retries=settings.crash_retries,
            lean_upserts=True,
        )


def _last_role(transcript: list[Message]) -> str | None:
    """Who spoke last (a compaction summary aside): continueLastTurn continues an assistant
    reply, answers a user message no turn answered (Think's ``_retryLastUserTurn``: a turn
    that failed before its first chunk left none), and with neither has nothing to do."""
    messages = [m for m in transcript if not compaction.is_compaction(m)]
    return messages[-1].role if messages else None
