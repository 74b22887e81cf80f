"""The pace floor of ``bench.pace``: bare Temporal in the wire contract's shape, at a model's pace.

    python -m bench.pace_floor TASK_QUEUE      (env TEMPORAL_ADDRESS, ANTHROPIC_BASE_URL)

The conversation is ``bench.floor``'s ``FloorConversation`` (an update runs each turn as a
child workflow and answers with its result, no store); its child here is ``PaceFloorTurn``:
per step an activity that makes the direct SDK streaming call (``bench.pace_sdk``, the same
call as the direct loop's), and a tool activity between steps. The deltas reach the client
over a TCP connection the model activity opens to the client's relay address (one byte per
delta, ``TCP_NODELAY``): the cheapest real route out of a worker process, no broker, no
store, nothing through Temporal. So what this floor adds to the direct loop is the contract's
hop (update, child workflow, activity scheduling, the result's way back) and nothing else.
Prints ``pace floor worker ready`` once it polls.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

from bench import floor

TIMEOUT = timedelta(minutes=2)
READY = "pace floor worker ready"


_sdk: list[Any] = []
"""The worker's one ``AsyncAnthropic`` (its connection pool stays warm, as the engine's)."""


def sdk() -> Any:
    if not _sdk:
        import anthropic

        _sdk.append(anthropic.AsyncAnthropic(max_retries=0, api_key="bench-key"))
    return _sdk[0]


@activity.defn(name="pace_floor_model")
async def model_step(request: dict[str, Any]) -> dict[str, Any]:
    """One streamed model step; each delta is relayed to ``request["relay"]`` as it comes."""
    from bench.pace_sdk import anthropic_step

    host, port = str(request["relay"]).rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port))
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        content, calls = await anthropic_step(
            sdk(), request["messages"], lambda: writer.write(b".")
        )
    finally:
        writer.close()
    return {"content": content, "calls": calls}


@activity.defn(name="pace_floor_tool")
async def tool_step(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``get_weather`` for the step's tool calls, as ``tool_result`` blocks."""
    from bench.pace_sdk import anthropic_results

    return anthropic_results(calls)


@workflow.defn(name="PaceFloorTurn")
class PaceFloorTurn:
    @workflow.run
    async def run(self, relay: str) -> int:
        """Up to 3 steps; the steps taken."""
        messages: list[Any] = [{"role": "user", "content": "weather?"}]
        for step in range(1, 4):
            reply = await workflow.execute_activity(
                model_step,
                {"messages": messages, "relay": relay},
                start_to_close_timeout=TIMEOUT,
            )
            if not reply["calls"]:
                return step
            results = await workflow.execute_activity(
                tool_step, reply["calls"], start_to_close_timeout=TIMEOUT
            )
            messages += [
                {"role": "assistant", "content": reply["content"]},
                {"role": "user", "content": results},
            ]
        return 3


if __name__ == "__main__":
    asyncio.run(floor.serve(sys.argv[1], [model_step, tool_step], [PaceFloorTurn], READY))
