"""``compact``: fold older messages into a summary when the context overflows.

The transcript itself is kept whole; the summary is one more stored message that context
assembly starts from (see ``activities.compaction``).
"""

from __future__ import annotations

from temporalio import activity

from durable_turns.activities import compaction
from durable_turns.activities import context as ctx_build
from durable_turns.activities.deps import ActivityDeps
from durable_turns.activities.heartbeats import keep_alive
from durable_turns.contract import COMPACT, CompactInput, CompactResult
from durable_turns.messages import Message
from durable_turns.store import TurnRecord


async def store_compaction(
    deps: ActivityDeps,
    turn: TurnRecord,
    context: list[Message],
    model: str,
    summary_id: str,
    reason: str,
) -> CompactResult:
    """Summarise ``context`` and store the summary under ``summary_id`` (idempotent)."""
    summary, result = await compaction.compact(
        context,
        session=await deps.session(),
        models=deps.models,
        model=model,
        summary_id=summary_id,
        reason=reason,
    )
    if summary is not None:
        await deps.store.add_messages(
            turn.conversation_id, [summary], turn.turn_id, owner=turn.owner
        )
    return result


class CompactActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=COMPACT)
    async def compact(self, inp: CompactInput) -> CompactResult:
        """Fold older messages into a summary (the transcript itself is kept whole)."""
        if (agent := self.deps.of(inp.turn)) is not self.deps:  # a sub-agent's turn
            return await CompactActivities(agent).compact(inp)
        turn = await self.deps.turn(inp.turn)
        async with keep_alive(self.deps.beat_every):
            context = await ctx_build.base_messages(self.deps.store, turn)
            summary_id = f"{turn.turn_id}/compaction-{turn.run}-{inp.reason}-{inp.number}"
            return await store_compaction(
                self.deps, turn, context, inp.model, summary_id, inp.reason
            )
