"""``relay_agent``: a sub-agent's live stream, copied onto its parent's under the tool call.

The parent turn runs this activity beside the child ``TurnWorkflow`` of an agent tool's call
(``workflows.subagent``). It follows the child turn's chunk stream from its start and
appends each event to the parent turn's stream as an ``agent-chunk`` event (the call's id
and name, the child's conversation, the child event's ``offset``, and the event itself), so
a reader of the parent (the front door, ``TurnsClient.chunks``) sees the child's reply as it
is written, as the tool's preliminary output. It ends after the child's ``turn-finish``.

Why a relay and not the child writing into both streams: the child's stream stays the
child's (its own owner, offsets, resets and readers), the child's activities stay what any
turn's are, and the copy is one durable activity the parent schedules and cancels with the
call. A relay retried on another worker (its worker died) starts after the last child offset
the parent's stream already holds for the call, so nothing is copied twice, and readers
drop an ``agent-chunk`` whose child offset is not past the last one they saw (a worker that
lost the activity but still runs it).
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from durable_turns.activities import heartbeats
from durable_turns.activities.deps import ActivityDeps
from durable_turns.activities.heartbeats import keep_alive
from durable_turns.contract import RELAY_AGENT, RelayAgentInput
from durable_turns.streams import AGENT_CHUNK, StreamEvent, StreamUnavailable


class AgentRelayActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=RELAY_AGENT)
    async def relay_agent(self, inp: RelayAgentInput) -> int:
        """Copy the child turn's stream onto the parent's until the child's ``turn-finish``;
        the number of events copied (0 with streaming off)."""
        streams = self.deps.streams
        if streams is None:
            return 0
        copied = 0
        async with keep_alive(self.deps.beat_every):
            after = await self._relayed(inp) if heartbeats.attempt() > 1 else -1
            try:
                async with self.deps.publisher(inp.turn, inp.step) as publisher:
                    assert publisher is not None
                    async for ev in streams.follow(inp.child_turn_id, after):
                        publisher.publish(AGENT_CHUNK, agent_chunk(inp, ev))
                        copied += 1
            except StreamUnavailable as e:  # the child's reply is the result all the same
                activity.logger.warning("%s; the sub-agent's chunks are not relayed", e)
        return copied

    async def _relayed(self, inp: RelayAgentInput) -> int:
        """The last child offset an earlier attempt copied onto the parent's stream."""
        assert self.deps.streams is not None
        last = -1
        for ev in await self.deps.streams.read(inp.turn.turn_id):
            if ev.type == AGENT_CHUNK and ev.data.get("tool_call_id") == inp.tool_call_id:
                last = max(last, int(ev.data.get("offset", -1)))
        return last


def agent_chunk(inp: RelayAgentInput, ev: StreamEvent) -> dict[str, Any]:
    """The parent's ``agent-chunk`` event for one event of the child's stream."""
    event: dict[str, Any] = {"type": ev.type, "data": ev.data}
    if ev.step is not None:
        event["step"] = ev.step
    if ev.attempt is not None:
        event["attempt"] = ev.attempt
    return {
        "tool_call_id": inp.tool_call_id,
        "tool_name": inp.tool_name,
        "conversation_id": inp.child_turn_id.rsplit("/turn-", 1)[0],
        "offset": ev.offset,
        "event": event,
    }
