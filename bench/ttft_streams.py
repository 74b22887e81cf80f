"""Temporal's own streaming baseline for ``bench.ttft``: ``temporalio.contrib.workflow_streams``.

    python -m bench.ttft_streams TASK_QUEUE      (env TEMPORAL_ADDRESS, ANTHROPIC_BASE_URL)

A workflow hosts a ``WorkflowStream``; its one activity streams the model through the
``anthropic`` SDK and publishes each text delta to the ``deltas`` topic (the first with
``force_flush``, so it is not held for the batch interval); the client starts the workflow
and subscribes. Runs as a worker process of its own, as the engine's does; prints
``streams worker ready`` once it polls.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamClient
from temporalio.worker import Worker

TOPIC = "deltas"


@activity.defn(name="streams_model_call")
async def model_call(model: str) -> None:
    import anthropic

    sdk = anthropic.AsyncAnthropic(max_retries=0)
    stream_client = WorkflowStreamClient.from_within_activity(
        batch_interval=timedelta(milliseconds=30)
    )
    deltas = stream_client.topic(TOPIC, type=str)
    first = True
    async with stream_client:
        async with sdk.messages.stream(
            model=model, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            async for event in stream:
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    deltas.publish(event.delta.text, force_flush=first)
                    first = False
    await sdk.close()


@workflow.defn(name="StreamsTurn")
class StreamsTurn:
    @workflow.init
    def __init__(self, model: str) -> None:
        self.stream = WorkflowStream()

    @workflow.run
    async def run(self, model: str) -> None:
        await workflow.execute_activity(
            model_call, model, start_to_close_timeout=timedelta(seconds=30)
        )


async def first_delta(client: Client, task_queue: str, workflow_id: str, model: str) -> None:
    """Start a turn and wait for its first text delta through the stream."""
    await client.start_workflow(StreamsTurn.run, model, id=workflow_id, task_queue=task_queue)
    subscriber = WorkflowStreamClient.create(client, workflow_id)
    async for _ in subscriber.topic(TOPIC, type=str).subscribe(
        poll_cooldown=timedelta(milliseconds=0)
    ):
        return
    raise RuntimeError("the stream ended without a delta")


async def serve(task_queue: str) -> None:
    from bench.common import serve_worker  # here: this module's workflow runs sandboxed

    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"])
    worker = Worker(client, task_queue=task_queue, workflows=[StreamsTurn], activities=[model_call])
    await serve_worker(worker, "streams worker ready")


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
    sys.stdout.flush()
    os._exit(0)
