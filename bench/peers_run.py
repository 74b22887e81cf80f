"""The peer side of measurement 6, run by ``bench/peers.py`` in the peers' virtual env.

    python -m bench.peers_run PEER --address A --engine-queue Q --engine-model-1 M
        --engine-model-5 M [--samples N]

``PEER`` is ``pydantic-ai`` or ``openai-agents``. It runs the peer's worker in this process
and, alternating with each peer turn, one engine turn over the wire contract (update
``sendMessage`` on ``ConversationWorkflow``, plain JSON) against the engine worker that the
benchmark keeps running, so the two latencies share the machine's conditions. Then the
history bytes of one model step with 1K and 100K tokens of prior conversation. Prints one
line ``RESULT <json>``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
import time
import uuid
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.common import activity_cost, median, prior_transcript_texts

MODULES = {"pydantic-ai": "bench.peer_pydantic_ai", "openai-agents": "bench.peer_openai_agents"}
PROMPT = "steps={steps} What is the weather in Oslo?"


async def engine_turn(client: Client, queue: str, conversation: str, model: str) -> None:
    """One engine turn through the wire contract only (what any Temporal client can send)."""
    op: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
        "ConversationWorkflow",
        id=conversation,
        task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    request = {
        "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
        "model": model,
    }
    result = await client.execute_update_with_start_workflow(
        "sendMessage", request, start_workflow_operation=op, result_type=dict
    )
    assert result["status"] == "completed", result


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from importlib import metadata

    peer = importlib.import_module(MODULES[args.peer])
    versions = {}
    for name in [*peer.PACKAGES, "temporalio"]:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    client = await peer.connect(args.address)
    engine = await Client.connect(args.address, data_converter=pydantic_data_converter)
    queue = f"peer-{args.peer}-{uuid.uuid4().hex[:6]}"
    out: dict[str, Any] = {"peer": args.peer, "versions": versions, "latency": {}, "history": {}}
    async with peer.worker(client, queue):

        async def peer_turn(steps: int, prior: list[Any] | None = None) -> str:
            workflow_id = f"{queue}-{uuid.uuid4().hex[:8]}"
            output = await peer.turn(
                client, queue, workflow_id, PROMPT.format(steps=steps), prior or []
            )
            assert "Here you are" in output, output
            return workflow_id

        for steps in (1, 5):
            model = args.engine_model_1 if steps == 1 else args.engine_model_5
            conversation = f"{queue}-engine-{steps}"
            peer_s, engine_s = [], []
            for i in range(2 + args.samples):
                started = time.perf_counter()
                await peer_turn(steps)
                middle = time.perf_counter()
                await engine_turn(engine, args.engine_queue, conversation, model)
                if i >= 2:  # two warm-up turns
                    peer_s.append(middle - started)
                    engine_s.append(time.perf_counter() - middle)
            out["latency"][str(steps)] = {
                "peer_s": median(peer_s),
                "engine_s": median(engine_s),
                "samples": {"peer": peer_s, "engine": engine_s},
            }
        for tokens in (1_000, 100_000):
            prior = [{"role": r, "text": t} for r, t in prior_transcript_texts(tokens)]
            workflow_id = await peer_turn(1, prior)
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            cost = activity_cost(history, peer.is_model_activity)
            out["history"][str(tokens)] = {
                "step_events": cost.events / max(cost.activities, 1),
                "step_bytes": cost.bytes / max(cost.activities, 1),
                "turn_events": cost.total_events,
                "turn_bytes": cost.total_bytes,
                "activities": cost.per_type,
            }
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("peer", choices=sorted(MODULES))
    p.add_argument("--address", required=True)
    p.add_argument("--engine-queue", required=True)
    p.add_argument("--engine-model-1", required=True)
    p.add_argument("--engine-model-5", required=True)
    p.add_argument("--samples", type=int, default=10)
    result = asyncio.run(main(p.parse_args()))
    print("RESULT " + json.dumps(result), flush=True)
    sys.stderr.flush()
    os._exit(0)  # temporalio on 3.11 can crash at interpreter exit
