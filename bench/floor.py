"""The Temporal floor: bare workflows with no-op activities.

``FloorTurn`` alone, started by the client, is the outside floor: what a user could write
instead of the engine (one workflow per turn, an activity per model step and per tool call).
``FloorConversation`` is the same turns in the shape of the engine's wire contract
(DESIGN.md §4): an update-with-start on a conversation workflow (with an "open" activity when
it starts, as the engine's, or without: the contract floor) that runs each request as a child
workflow and answers with its result (a request naming a ``child`` workflow type runs that
instead: ``bench.pace_floor``'s turn at a model's pace). The activities do nothing and carry
a few bytes, so what a floor turn costs is what Temporal itself costs for that shape.
``FloorStamp`` runs one activity that answers with the time it started: how long a client
waits before any turn could call its model.

    python -m bench.floor TASK_QUEUE      a floor worker process (env TEMPORAL_ADDRESS)

Only temporalio is imported here.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import deque
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

TIMEOUT = timedelta(minutes=2)


@activity.defn(name="floor_noop")
async def noop(step: int) -> int:
    return step


@activity.defn(name="floor_stamp")
async def stamp() -> float:
    """When the activity started (epoch seconds; client, server and worker share a clock)."""
    return time.time()


@workflow.defn(name="FloorTurn")
class FloorTurn:
    @workflow.run
    async def run(self, activities: int, bookkeeping: bool = False) -> int:
        """``bookkeeping``: a no-op local activity before the activities and one after, the
        shape of the engine's ``begin_turn`` and ``finish_turn``."""
        if bookkeeping:
            await workflow.execute_local_activity(noop, -1, start_to_close_timeout=TIMEOUT)
        for i in range(activities):
            await workflow.execute_activity(noop, i, start_to_close_timeout=TIMEOUT)
        if bookkeeping:
            await workflow.execute_local_activity(noop, -2, start_to_close_timeout=TIMEOUT)
        return activities


@workflow.defn(name="FloorStamp")
class FloorStamp:
    @workflow.run
    async def run(self) -> float:
        return await workflow.execute_activity(stamp, start_to_close_timeout=TIMEOUT)


@workflow.defn(name="FloorConversation")
class FloorConversation:
    def __init__(self) -> None:
        self._queue: deque[dict[str, Any]] = deque()
        self._done: dict[str, Any] = {}
        self._turns = 0

    @workflow.run
    async def run(self, opened: bool = True) -> None:
        """``opened``: run an "open" activity first, as the engine reads its turn count from
        the store (sections 1 and 3); the contract floor (section 6, ``bench.ttft``) has no
        store to open."""
        if opened:
            await workflow.execute_activity(noop, 0, start_to_close_timeout=TIMEOUT)
        while True:
            await workflow.wait_condition(lambda: bool(self._queue))
            request = self._queue.popleft()
            request_id = str(request["request_id"])
            self._turns += 1
            turn_id = f"{workflow.info().workflow_id}/turn-{self._turns}"
            if request.get("child"):  # another bench's turn workflow (``bench.pace_floor``)
                self._done[request_id] = await workflow.execute_child_workflow(
                    str(request["child"]), request.get("arg"), id=turn_id
                )
            elif request.get("stamp"):
                self._done[request_id] = await workflow.execute_child_workflow(
                    FloorStamp.run, id=turn_id
                )
            else:
                self._done[request_id] = await workflow.execute_child_workflow(
                    FloorTurn.run,
                    args=[int(request.get("activities", 0)), bool(request.get("bookkeeping"))],
                    id=turn_id,
                )

    @workflow.update(name="send")
    async def send(self, request: dict[str, Any]) -> Any:
        """The turn's result: its activity count, (``stamp``) when its activity started, or
        (``child``) the result of that workflow type run with ``arg``."""
        request_id = str(request["request_id"])
        self._queue.append(request)
        await workflow.wait_condition(lambda: request_id in self._done)
        return self._done.pop(request_id)


@workflow.defn(name="FloorCall")
class FloorCall:
    """Runs one activity by name (lets a benchmark time code inside a real activity)."""

    @workflow.run
    async def run(self, name: str, arg: Any) -> Any:
        return await workflow.execute_activity(name, arg, start_to_close_timeout=TIMEOUT)


WORKFLOWS = [FloorTurn, FloorStamp, FloorConversation, FloorCall]


def floor_worker(
    client: Client,
    task_queue: str,
    activities: list[Any] | None = None,
    workflows: list[Any] | None = None,
) -> Worker:
    """Same concurrency limits as the engine's worker (``worker.running_worker``). The
    workflows run in temporalio's sandbox, the Worker's default and so what a user's own
    workflows would pay, unless ``FLOOR_SANDBOX=off`` (as the engine's own run by default)."""
    unsandboxed = os.environ.get("FLOOR_SANDBOX") == "off"  # the default runner otherwise
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[*WORKFLOWS, *(workflows or [])],
        activities=[noop, stamp, *(activities or [])],
        max_concurrent_activities=200,
        workflow_runner=UnsandboxedWorkflowRunner() if unsandboxed else SandboxedWorkflowRunner(),
    )


async def _send(
    client: Client, task_queue: str, conversation: str, request: dict[str, Any], opened: bool
) -> Any:
    """An update-with-start of ``send`` on the floor conversation ``conversation``."""
    op = WithStartWorkflowOperation(
        FloorConversation.run,
        opened,
        id=conversation,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    return await client.execute_update_with_start_workflow(
        "send", request, start_workflow_operation=op
    )


async def send(
    client: Client,
    task_queue: str,
    conversation: str,
    request_id: str,
    activities: int,
    opened: bool = True,
    bookkeeping: bool = False,
) -> int:
    """One floor turn: the same client call as ``TurnsClient.send`` (update-with-start); a
    new conversation runs its "open" activity first unless ``opened`` is False;
    ``bookkeeping``: the turn runs a local activity before and after (``FloorTurn``)."""
    request = {"request_id": request_id, "activities": activities, "bookkeeping": bookkeeping}
    return int(await _send(client, task_queue, conversation, request, opened))


async def send_child(
    client: Client, task_queue: str, conversation: str, request_id: str, child: str, arg: Any
) -> Any:
    """A turn in the wire contract's shape whose child is the workflow type ``child`` run with
    ``arg`` (a new conversation starts without the "open" activity); its result."""
    request = {"request_id": request_id, "child": child, "arg": arg}
    return await _send(client, task_queue, conversation, request, opened=False)


async def send_stamped(
    client: Client, task_queue: str, conversation: str, request_id: str
) -> float:
    """A floor turn in the wire contract's shape whose activity answers when it started (a
    new conversation starts without the "open" activity: the contract floor has no store)."""
    request = {"request_id": request_id, "stamp": True}
    return float(await _send(client, task_queue, conversation, request, opened=False))


async def bare_stamped(client: Client, task_queue: str, workflow_id: str) -> float:
    """A bare workflow started by the client; when its one activity started."""
    return await client.execute_workflow(FloorStamp.run, id=workflow_id, task_queue=task_queue)


async def bare(client: Client, task_queue: str, workflow_id: str, activities: int) -> int:
    """A bare workflow: ``activities`` no-op activities, no parent."""
    return await client.execute_workflow(
        FloorTurn.run, activities, id=workflow_id, task_queue=task_queue
    )


async def serve(
    task_queue: str,
    activities: list[Any] | None = None,
    workflows: list[Any] | None = None,
    ready: str = "floor worker ready",
) -> None:
    """A floor worker process until SIGTERM (``activities``/``workflows``: another bench's,
    besides the floor's); prints ``ready`` once it polls."""
    from temporalio.contrib.pydantic import pydantic_data_converter

    from bench.common import serve_worker  # here: this module's workflows run sandboxed

    client = await Client.connect(
        os.environ["TEMPORAL_ADDRESS"], data_converter=pydantic_data_converter
    )
    await serve_worker(floor_worker(client, task_queue, activities, workflows), ready)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
