"""The peers of ``bench.pace``: each integration's streaming turn against the local mock.

    python -m bench.pace_peers PEER TASK_QUEUE
        (env TEMPORAL_ADDRESS, ANTHROPIC_BASE_URL, OPENAI_BASE_URL, PACE_BATCH_MS)

Runs only in the peers' virtual environment (``bench/peers.py``), as a worker process of its
own; prints ``pace peer worker ready`` once it polls and stops on SIGTERM. ``PEER`` is

* ``openai-agents``: the OpenAI Agents SDK's Temporal plugin with a real model class
  (``OpenAIProvider(use_responses=True)``: ``OpenAIResponsesModel`` on ``AsyncOpenAI`` at the
  mock's OpenAI base URL). The workflow calls ``Runner.run_streamed``; the plugin's streaming
  model activity publishes every raw Responses event to the workflow's ``WorkflowStream``
  (``ModelActivityParameters.streaming_topic``); ``get_weather`` is an activity
  (``activity_as_tool``).
* ``pydantic-ai``: ``TemporalDurability(event_stream_topic=…)`` on an agent with
  ``AnthropicModel`` (its ``AnthropicProvider`` at the mock's base URL): the model-request
  activity publishes the live model events to the workflow's ``AgentEventStream``, the
  workflow its own events and the terminal result; ``get_weather`` is the agent's tool.

Each peer is a module of its own (``bench.pace_peer_openai_agents``,
``bench.pace_peer_pydantic_ai``: a workflow sandbox re-imports a workflow's module, and
neither plugin passes the other's modules through). Both flush the activity's publishes
every ``PACE_BATCH_MS`` (default 100, both integrations' own default). The client side (``bench.pace``) subscribes with ``temporalio``'s
``WorkflowStreamClient`` and needs neither peer installed.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import sys
from datetime import timedelta

TOPIC = "pace"
TIMEOUT = timedelta(seconds=60)
BATCH = timedelta(milliseconds=float(os.environ.get("PACE_BATCH_MS", "100")))
KEY = "bench-key"
MODULES = {
    "openai-agents": "bench.pace_peer_openai_agents",
    "pydantic-ai": "bench.pace_peer_pydantic_ai",
}


async def serve(peer: str, task_queue: str) -> None:
    module = importlib.import_module(MODULES[peer])
    worker = await module.worker(os.environ["TEMPORAL_ADDRESS"], task_queue)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print("pace peer worker ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
    sys.stdout.flush()
    os._exit(0)  # temporalio on 3.11 can crash at interpreter exit
