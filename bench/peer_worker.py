"""A peer's worker as a process of its own, so its CPU is its own (measurement 6).

    python -m bench.peer_worker PEER TASK_QUEUE      (env TEMPORAL_ADDRESS)

``PEER`` is ``pydantic-ai`` or ``openai-agents``; runs only in the peers' virtual environment
(see ``bench/peers.py``). Prints ``peer worker ready`` once it polls; stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys

from bench.common import serve_worker

MODULES = {"pydantic-ai": "bench.peer_pydantic_ai", "openai-agents": "bench.peer_openai_agents"}


async def serve(name: str, task_queue: str) -> None:
    peer = importlib.import_module(MODULES[name])
    client = await peer.connect(os.environ["TEMPORAL_ADDRESS"])
    await serve_worker(peer.worker(client, task_queue), "peer worker ready")


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
    sys.stdout.flush()
    os._exit(0)  # temporalio on 3.11 can crash at interpreter exit
