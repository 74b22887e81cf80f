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

A call of the child that waits for the client (a client tool, an approval) is announced on
the parent's stream as the parent's own are: a ``tool-wait`` event, under the id
``contract.agent_call_id`` makes (``agent:<the agent call's id>/<the child's call id>``) with
an ``agent`` object naming the agent call, and its ``tool-result`` once the child records it,
under the same id. So a reader of the parent (``TurnsClient.chunks``, the front door) sees
the child's wait where it sees the parent's, and answers it through the parent's
conversation; the parent turn forwards the answer to the child (``workflows.turn``).
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from durable_turns.activities import heartbeats
from durable_turns.activities.deps import ActivityDeps
from durable_turns.activities.heartbeats import keep_alive
from durable_turns.contract import RELAY_AGENT, RelayAgentInput, agent_call_id
from durable_turns.streams import (
    AGENT_CHUNK,
    TOOL_RESULT,
    TOOL_WAIT,
    ChunkPublisher,
    StreamEvent,
    StreamUnavailable,
)


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
        waited: set[str] = set()
        async with keep_alive(self.deps.beat_every):
            after = await self._relayed(inp, waited) if heartbeats.attempt() > 1 else -1
            try:
                async with self.deps.publisher(inp.turn, inp.step) as publisher:
                    assert publisher is not None
                    async for ev in streams.follow(inp.child_turn_id, after):
                        # before the agent-chunk: a retry starts after the last one copied
                        await _announce(publisher, inp, ev, waited)
                        publisher.publish(AGENT_CHUNK, agent_chunk(inp, ev))
                        copied += 1
            except StreamUnavailable as e:  # the child's reply is the result all the same
                activity.logger.warning("%s; the sub-agent's chunks are not relayed", e)
        return copied

    async def _relayed(self, inp: RelayAgentInput, waited: set[str]) -> int:
        """The last child offset an earlier attempt copied onto the parent's stream (and,
        into ``waited``, the child's calls it announced as waiting)."""
        assert self.deps.streams is not None
        last = -1
        for ev in await self.deps.streams.read(inp.turn.turn_id):
            if ev.type == AGENT_CHUNK and ev.data.get("tool_call_id") == inp.tool_call_id:
                last = max(last, int(ev.data.get("offset", -1)))
            agent = ev.data.get("agent") if ev.type == TOOL_WAIT else None
            if isinstance(agent, dict) and agent.get("tool_call_id") == inp.tool_call_id:
                waited.add(str(agent.get("child_tool_call_id")))
        return last


async def _announce(
    publisher: ChunkPublisher, inp: RelayAgentInput, ev: StreamEvent, waited: set[str]
) -> None:
    """A child's call that waits for the client, and later its result, on the parent's
    stream as the parent's own: ``tool-wait`` and ``tool-result`` under the id
    ``agent_call_id`` makes."""
    child_call = ev.data.get("tool_call_id") if isinstance(ev.data, dict) else None
    if not isinstance(child_call, str):
        return
    if ev.type == TOOL_WAIT:
        waited.add(child_call)
    elif ev.type != TOOL_RESULT or child_call not in waited:
        return
    data = {
        **ev.data,
        "tool_call_id": agent_call_id(inp.tool_call_id, child_call),
        "agent": {
            "tool_call_id": inp.tool_call_id,
            "tool_name": inp.tool_name,
            "conversation_id": inp.child_turn_id.rsplit("/turn-", 1)[0],
            "child_tool_call_id": child_call,
        },
    }
    if ev.type == TOOL_WAIT:
        await publisher.tool_wait(data)
    else:
        await publisher.tool_result(data)


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
