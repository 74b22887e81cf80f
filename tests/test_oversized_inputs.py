"""Issue 25, item 2: no input a client can size wedges a conversation.

Each test runs against the real dev server and a real worker process, at the default limits,
and fails on the code before the fix (named in its docstring).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from durable_turns import DurableTurnsPlugin
from durable_turns._temporal.interceptors import answerable_bytes, update_bound
from durable_turns.contract import CONVERSATION_WORKFLOW, TurnResult
from durable_turns.devserver import SIGNALS_PER_RUN
from durable_turns.messages import ToolResultPart
from testkit.load import busy_cores
from tests.support.harness import Harness
from tests.support.probes import pending_calls


def _request(size: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "y" * size}], "model": "demo:echo"}


SERVERS_OWN = (
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND,
)


async def _failed_tasks(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The failure messages of the workflow's failed workflow tasks (none, when healthy).
    The server's own two are not failures of ours and do not count; on a loaded machine they
    happen: UnhandledCommand (a signal arrived while a task that closes the workflow was being
    completed) and ForceCloseCommand (signals of megabytes buffered while a task ran passed
    the server's buffer limit). Either way the task is simply redone with them."""
    failures = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            attributes = event.workflow_task_failed_event_attributes
            if attributes.cause in SERVERS_OWN:
                continue
            failures.append(f"{attributes.cause}: {attributes.failure.message}")
    return failures


async def _timed(coro: Any) -> tuple[Any, float]:
    started = time.monotonic()
    try:
        result = await coro
    except Exception as e:  # the caller's refusal is the result here
        result = e
    return result, time.monotonic() - started


def _bounded(harness: Harness) -> Client:
    """A client with the engine's plugin (as ``TurnsClient.connect``, ``turns`` and the front
    door build theirs), on the harness's connection."""
    return Client(
        harness.client.service_client,
        namespace=harness.client.namespace,
        plugins=[DurableTurnsPlugin()],
    )


async def _huge_update_then_a_normal_one(harness: Harness, name: str) -> None:
    conversation = harness.conv(name)
    assert (await harness.send(conversation, "first", model="demo:echo")).status == "completed"
    handle = _bounded(harness).get_workflow_handle(conversation)

    async def normal_a_second_later() -> tuple[Any, float]:
        await asyncio.sleep(1)
        return await _timed(harness.send(conversation, "second", model="demo:echo"))

    (huge, huge_s), (normal, normal_s) = await asyncio.gather(
        _timed(handle.execute_update("sendMessage", _request(3_400_000))),
        normal_a_second_later(),
    )
    assert isinstance(huge, WorkflowUpdateFailedError), huge
    assert isinstance(huge.cause, ApplicationError)
    assert huge.cause.type == "RequestTooLarge" and huge.cause.non_retryable
    assert "a worker can answer at most 2031616" in huge.cause.message
    assert huge_s < 1, f"the oversized update was refused after {huge_s:.1f}s"
    assert isinstance(normal, TurnResult), normal
    assert normal.status == "completed" and normal.turn_number == 2
    assert normal_s < 5, f"the normal update took {normal_s:.1f}s"
    assert await _failed_tasks(handle) == []


async def test_an_update_far_over_the_limit_is_refused_by_the_client(harness: Harness) -> None:
    """Old code (before any bound): the validator rejected the 3.4 MB update, but the
    rejection echoes the whole request (Temporal's update protocol) and was over the 2 MiB
    blob limit: the workflow task failed (PayloadsTooLarge) on every retry, and both this
    update and a normal one sent a second later were refused after ~20 s. A client with the
    plugin never sends it."""
    harness.start_worker()
    await _huge_update_then_a_normal_one(harness, "huge-update")
    assert "TMPRL1103" not in harness.workers[0].log_tail(20_000)


async def test_an_update_far_over_the_limit_with_the_cores_loaded(harness: Harness) -> None:
    """The same, while two other processes keep both cores busy."""
    harness.start_worker()
    with busy_cores():
        await _huge_update_then_a_normal_one(harness, "huge-update-loaded")


async def test_a_huge_update_with_start_leaves_a_working_conversation(harness: Harness) -> None:
    """Old code: the new conversation's first workflow task failed the same way. A client with
    the plugin refuses it before anything starts."""
    harness.start_worker()
    conversation = harness.conv("huge-uws")
    start = WithStartWorkflowOperation(
        CONVERSATION_WORKFLOW,
        id=conversation,
        task_queue=harness.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    refused, refused_s = await _timed(
        _bounded(harness).execute_update_with_start_workflow(
            "sendMessage", _request(3_400_000), start_workflow_operation=start
        )
    )
    assert isinstance(refused, WorkflowUpdateFailedError) and refused_s < 1
    assert isinstance(refused.cause, ApplicationError)
    assert refused.cause.type == "RequestTooLarge"
    result = await asyncio.wait_for(harness.send(conversation, "hi", model="demo:echo"), 10)
    assert result.status == "completed" and result.turn_number == 1
    assert await _failed_tasks(harness.client.get_workflow_handle(conversation)) == []


UNBOUNDED_WEDGE_S = 30
"""docs/limits.md: what an unanswerable update from a client without the plugin costs the
conversation at most (measured ~20 s: its caller's update RPC gives up, then the task goes on)."""


async def test_an_unanswerable_update_from_a_client_without_the_plugin(harness: Harness) -> None:
    """The documented limit (docs/limits.md): a plain Temporal client, which the plugin does
    not bound, sends a 3.4 MB update. The worker cannot answer it (the rejection echoes the
    request, over the 2 MiB blob limit): its workflow task fails, the conversation's other
    updates wait, and once the large one's caller is answered (an error) the conversation
    goes on with nothing lost."""
    harness.start_worker()
    conversation = harness.conv("huge-unbounded")
    assert (await harness.send(conversation, "first", model="demo:echo")).status == "completed"
    handle = harness.client.get_workflow_handle(conversation)  # the test's plain client

    async def normal_a_second_later() -> tuple[Any, float]:
        await asyncio.sleep(1)
        return await _timed(harness.send(conversation, "second", model="demo:echo"))

    (huge, huge_s), (normal, normal_s) = await asyncio.gather(
        _timed(handle.execute_update("sendMessage", _request(3_400_000))),
        normal_a_second_later(),
    )
    started = time.monotonic() - normal_s
    tries = 1
    while not isinstance(normal, TurnResult) and time.monotonic() - started < 120:
        await asyncio.sleep(1)  # refused while the task was failing: sent again
        normal, _ = await _timed(harness.send(conversation, "second", model="demo:echo"))
        tries += 1
    normal_s = time.monotonic() - started
    print(
        f"unbounded: huge {huge!r} after {huge_s:.1f}s; normal {type(normal).__name__}"
        f" after {normal_s:.1f}s and {tries} tries"
    )
    assert isinstance(huge, RPCError), huge
    assert huge_s < UNBOUNDED_WEDGE_S
    assert isinstance(normal, TurnResult) and normal.status == "completed", normal
    assert normal_s < UNBOUNDED_WEDGE_S + 5
    result = await asyncio.wait_for(harness.send(conversation, "third", model="demo:echo"), 10)
    assert result.status == "completed"


@pytest.mark.parametrize("size", [300_000, 1_900_000])
async def test_an_oversized_update_that_can_be_answered_gets_its_type(
    harness: Harness, size: int
) -> None:
    """Under what an answer can carry, the validator's typed RequestTooLarge still answers."""
    harness.start_worker()
    conversation = harness.conv("big-update")
    await harness.send(conversation, "first", model="demo:echo")
    handle = harness.client.get_workflow_handle(conversation)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("sendMessage", _request(size))
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "RequestTooLarge"
    assert len(str(cause)) < 500, "the rejection does not echo the request"
    assert (await harness.send(conversation, "again", model="demo:echo")).turn_number == 2
    assert await _failed_tasks(handle) == []


def test_the_bound_is_what_an_answer_can_carry() -> None:
    """The namespace's blob size limit less the answer's own room (64 KiB)."""
    assert answerable_bytes(None) == answerable_bytes(2 * 1024 * 1024) == 2_031_616
    assert answerable_bytes(512 * 1024) == 458_752


# --- requests that grow when parsed ------------------------------------------------------


def _many_messages(count: int, request_id: str) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": "x"} for _ in range(count)],
        "request_id": request_id,
        "model": "demo:echo",
    }


async def test_a_request_that_grows_when_parsed_is_rejected_not_wedged(harness: Harness) -> None:
    """Old code: a 240 KB request (under every limit) of 8,000 one-letter messages with a
    500-byte request id became a 4.6 MB turn input once each message carried its scoped id:
    starting the turn failed the workflow task (PayloadsTooLarge) on every retry, for ever."""
    harness.start_worker()
    conversation = harness.conv("grows")
    await harness.send(conversation, "first", model="demo:echo")
    handle = harness.client.get_workflow_handle(conversation)
    await handle.signal("submitMessages", _many_messages(8000, "r" * 500))
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("sendMessage", _many_messages(8000, "u" * 500))
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "RequestTooLarge"
    assert "as the conversation keeps it" in cause.message
    result = await asyncio.wait_for(harness.send(conversation, "next", model="demo:echo"), 10)
    assert result.status == "completed" and result.turn_number == 2
    state = await harness.turns.state(conversation)
    [rejected] = [r for r in state.recent if r.status == "rejected"]
    assert rejected.error is not None and rejected.error.type == "RequestTooLarge"
    # a request that grows but fits still runs
    await handle.signal("submitMessages", _many_messages(500, "ok-" + "o" * 400))
    await _until(lambda: _turns(harness, conversation, 3))
    assert await _failed_tasks(handle) == []


async def _turns(harness: Harness, conversation: str, count: int) -> bool:
    state = await harness.turns.state(conversation)
    return state.turn_count >= count and state.running is None and not state.queue


async def _until(check: Any, within_s: float = 20) -> None:
    deadline = time.monotonic() + within_s
    while not await check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.1)


async def test_a_rejection_never_echoes_a_clients_key(harness: Harness) -> None:
    """Old code: an extra field's name went into the rejection whole (20 of them, 100 KB each,
    made a 1 MB state answer, carried over continue-as-new)."""
    harness.start_worker()
    conversation = harness.conv("echo-key")
    await harness.send(conversation, "first", model="demo:echo")
    handle = harness.client.get_workflow_handle(conversation)
    for i in range(20):
        key = f"k{i}" * 60_000
        await handle.signal(
            "submitMessages", {"messages": [{"role": "user", "content": "x"}], key: 1}
        )
    await harness.send(conversation, "second", model="demo:echo")
    state = await harness.turns.state(conversation)
    assert state.rejected_count == 20
    assert len(state.model_dump_json()) < 60_000
    messages = [r.error.message for r in state.recent if r.status == "rejected" and r.error]
    assert messages and all(len(m) < 400 for m in messages)


def test_what_continue_as_new_carries_is_measured_and_bounded() -> None:
    """Results, rejected and finished records are left behind, oldest first, until the
    carry fits; the queue is carried whole."""
    from pydantic_core import to_json

    from durable_turns.contract import (
        MAX_CARRIED_BYTES,
        ConversationInput,
        ErrorInfo,
        PendingRequest,
        RequestRecord,
    )
    from durable_turns.workflows.conversation_machine import fit as _fit

    def result(i: int) -> TurnResult:
        return TurnResult(
            request_id=f"r{i}",
            conversation_id="c",
            turn_number=i,
            workflow_id="w",
            status="completed",
            text="t" * 60_000,
        )

    def record(i: int) -> RequestRecord:
        error = ErrorInfo(type="ProviderError", message="e" * 5000)
        return RequestRecord(request_id=f"q{i}" * 100, status="error", error=error)

    queue = [PendingRequest(request_id=f"p{i}", body={"b": "z" * 100_000}) for i in range(5)]
    carry = ConversationInput(
        queue=queue,
        results=[result(i) for i in range(30)],
        recent=[record(i) for i in range(50)],
        rejected=[record(i) for i in range(20)],
        last_body={"b": "z" * 200_000},
    )
    assert len(to_json(carry)) > 2 * 1024 * 1024
    fitted = _fit(carry)
    assert len(to_json(fitted)) <= MAX_CARRIED_BYTES
    assert fitted.queue == queue and fitted.results  # the newest results stay
    assert fitted.results[-1].request_id == "r29" and fitted.recent and fitted.rejected


# --- tool results ---------------------------------------------------------------------------

LOCATE = [
    {"text": "Let me ask your device.", "tool_calls": [{"name": "where_am_i", "input": {}}]},
    {"text": "You are in {tool_results}."},
]


async def test_a_burst_of_large_tool_results_reaches_the_turn(harness: Harness) -> None:
    """Old code: the conversation forwarded every submitToolResult to the turn at once, one
    command each; 20 of 250 KB in one workflow task made a completion over gRPC's 4 MiB
    limit (GrpcMessageTooLarge), and Temporal terminated the conversation and its turn."""
    first = harness.start_worker()
    conversation = harness.conv("tool-burst")
    request = await harness.turns.submit(conversation, "where?", model=harness.script(LOCATE))
    [call] = await pending_calls(harness, conversation)
    first.kill()  # the burst arrives while no worker runs: one activation takes it all
    handle = harness.client.get_workflow_handle(conversation)
    for i in range(20):
        await handle.signal("submitToolResult", {"tool_call_id": f"x-{i}", "output": "z" * 250_000})
    await handle.signal(
        "submitToolResult", {"tool_call_id": call["tool_call_id"], "output": "Faro"}
    )
    harness.start_worker()
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "completed" and result.auto_continue, result.error
    assert await _failed_tasks(handle) == []
    assert await _failed_tasks(harness.client.get_workflow_handle(result.workflow_id)) == []
    assert (await harness.send(conversation, "still there?", model="demo:echo")).status == (
        "completed"
    )


async def test_many_large_client_answers_are_sent_in_bounded_batches(harness: Harness) -> None:
    """Old code: a step's 20 client calls, each answered with 250 KB, were all scheduled in
    one workflow task (5 MB of activity inputs): over gRPC's limit, and the turn and its
    conversation were terminated."""
    harness.start_worker()
    conversation = harness.conv("many-answers")
    model = harness.script(
        [{"tool_calls": [{"name": "where_am_i", "input": {}}] * 20}, {"text": "done"}]
    )
    request = await harness.turns.submit(conversation, "where, twenty times?", model=model)
    calls = await pending_calls(harness, conversation, 20)
    turn = harness.client.get_workflow_handle(f"{conversation}/turn-1")
    for i, call in enumerate(calls):
        answer = {"tool_call_id": call["tool_call_id"], "output": f"{i}" + "z" * 250_000}
        await turn.signal("toolResult", answer)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "completed" and result.auto_continue, result.error
    assert await _failed_tasks(turn) == []
    messages = await (await harness.store()).messages(conversation)
    outputs = [p.output for m in messages for p in m.parts if isinstance(p, ToolResultPart)]
    assert sorted(o[: len(str(i))] for i, o in enumerate(outputs)) == sorted(
        str(i) for i in range(20)
    )


# --- query answers --------------------------------------------------------------------------


async def test_the_state_answer_stays_bounded_whatever_clients_send(harness: Harness) -> None:
    """The worst a client can make of the ``state`` answer: a full queue of requests with
    512-byte ids, and the 20 rejections shown with the longest messages. It stays far under
    the 2 MiB a query answer may carry (queries answered inside a workflow task count too)."""
    conversation = harness.conv("big-state")
    handle = await harness.client.start_workflow(
        CONVERSATION_WORKFLOW, id=conversation, task_queue=harness.task_queue
    )
    first = harness.turns.request("where?", model=harness.script(LOCATE))
    requests = [first] + [
        {
            "messages": [{"role": "user", "content": "q"}],
            "request_id": f"{i:04d}" + "i" * 508,
            "model": "demo:echo",
        }
        for i in range(1100)
    ]
    requests += [
        {"messages": "no", "request_id": "é" * 200, f"{i}" * 200_000: 1} for i in range(20)
    ]
    sem = asyncio.Semaphore(32)

    async def send(arg: dict[str, Any]) -> None:
        async with sem:
            await handle.signal("submitMessages", arg)

    await send(requests[0])  # first: its turn waits for the client, the others stay queued
    await asyncio.gather(*(send(r) for r in requests[1:]))
    harness.start_worker()  # one activation takes them all
    await pending_calls(harness, conversation)
    state = await harness.turns.state(conversation)
    assert state.queued_count >= 300 and state.rejected_count >= 20
    assert len(state.model_dump_json().encode()) < 1024 * 1024
    turn = await harness.client.get_workflow_handle(f"{conversation}/turn-1").query("state")
    assert len(str(turn)) < 10_000
    await handle.terminate()


# --- signals --------------------------------------------------------------------------------


async def test_every_signal_far_over_its_limit_is_refused_and_nothing_fails(
    harness: Harness,
) -> None:
    """Every signal a client can size, at 1 MB (over the engine's limit: a typed rejection)
    and at 3.4 MB (over the server's blob limit: refused to the sender, never recorded). No
    workflow task fails, and the conversation and its waiting turn go on."""
    harness.start_worker()
    conversation = harness.conv("big-signals")
    request = await harness.turns.submit(conversation, "where?", model=harness.script(LOCATE))
    [call] = await pending_calls(harness, conversation)
    handle = harness.client.get_workflow_handle(conversation)
    turn = harness.client.get_workflow_handle(f"{conversation}/turn-1")

    def payloads(size: int) -> list[tuple[WorkflowHandle[Any, Any], str, Any]]:
        big = "y" * size
        return [
            (handle, "submitMessages", _request(size)),
            (handle, "continueLastTurn", {"body": {"x": big}}),
            (handle, "cancelChat", {"request_id": "r", "x": big}),
            (handle, "submitToolResult", {"tool_call_id": call["tool_call_id"], "output": big}),
            (turn, "toolResult", {"tool_call_id": call["tool_call_id"], "output": big}),
        ]

    for target, name, arg in payloads(3_400_000):
        with pytest.raises(RPCError, match="size exceeds limit"):
            await target.signal(name, arg)
    for target, name, arg in payloads(1_000_000):
        await target.signal(name, arg)
    state = await harness.turns.state(conversation)
    types = [r.error.type for r in state.recent if r.status == "rejected" and r.error]
    assert types == ["RequestTooLarge"] * 4
    assert any("RequestTooLarge" in r for r in (await turn.query("state"))["rejected_tool_results"])
    await harness.turns.submit_tool_result(conversation, call["tool_call_id"], "Faro")
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 30)
    assert result.status == "completed"
    assert await _failed_tasks(handle) == [] and await _failed_tasks(turn) == []


def _worst_request(n: int) -> dict[str, Any]:
    """A request just under the 256 KiB limit that costs the most to reject: thousands of
    valid messages, then one that is not (validation reads them all before it finds it)."""
    messages: list[Any] = [{"role": "user", "content": f"m{i}"} for i in range(7_300)]
    messages.append({"role": "nobody", "content": n})
    return {"messages": messages, "request_id": f"worst-{n}"}


async def _signals_in_one_activation(
    harness: Harness, conversation: str, signals: list[tuple[str, Any]]
) -> WorkflowHandle[Any, Any]:
    """Deliver ``signals`` while no worker runs: the next worker's first task takes them all."""
    handle = await harness.client.start_workflow(
        CONVERSATION_WORKFLOW, id=conversation, task_queue=harness.task_queue
    )
    sem = asyncio.Semaphore(32)

    async def one(name: str, arg: Any) -> None:
        async with sem:
            await handle.signal(name, arg)

    await asyncio.gather(*(one(name, arg) for name, arg in signals))
    return handle


async def test_a_burst_of_the_costliest_signals_with_the_cores_loaded(harness: Harness) -> None:
    """Issue 25 item 1. Old code: each signal was parsed and validated in its handler, so a
    burst delivered in one activation cost the sum of them all: 60 requests that each take
    ~30 ms to reject (7,300 valid messages, then an invalid one) and 2,000 small malformed
    ones ran past the 2 s deadlock detector with the cores loaded (TMPRL1101), the task failed
    on every retry and every later request was refused. Now a handler only keeps the payload,
    and the inbox parses a bounded amount per workflow task."""
    conversation = harness.conv("costly-burst")
    worst = [("submitMessages", _worst_request(i)) for i in range(60)]
    assert 240_000 < len(json.dumps(worst[0][1], separators=(",", ":"))) < 262_144
    small = [("submitMessages", {"messages": "nope", "n": i}) for i in range(2000)]
    with busy_cores():
        handle = await _signals_in_one_activation(harness, conversation, worst + small)
        harness.start_worker()
        result, _ = await _timed(
            asyncio.wait_for(harness.send(conversation, "still there?", model="demo:echo"), 60)
        )
        assert isinstance(result, TurnResult) and result.status == "completed", result
    state = await harness.turns.state(conversation)
    assert state.rejected_count == 2060, state.rejected_count
    assert await _failed_tasks(handle) == []
    log = harness.workers[0].log_tail(50_000)
    assert "TMPRL1101" not in log and "Potential deadlock" not in log


def _asked(request_id: str, text: str) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "messages": [{"role": "user", "content": text}],
        "model": "demo:echo",
    }


@pytest.mark.parametrize("loaded", [False, True], ids=["idle", "loaded"])
async def test_a_burst_of_ten_thousand_signals_while_no_worker_runs(
    harness: Harness, loaded: bool
) -> None:
    """10,000 signals sent to one conversation while no worker runs. The server takes
    ``history.maximumSignalsPerExecution`` of them (2,500 on the dev server, as
    docs/deployment.md sets it) and refuses the rest to their senders; the next worker's first
    workflow task holds all it took, one job each in one activation, run by the SDK's stock
    runner. That activation stays within the deadlock detector's 2 s, idle and with both cores
    loaded, and a request sent after the burst runs. (Temporal's default, 10,000 in one
    activation, ran past it with both cores loaded: TMPRL1101 on every retry.)"""
    conversation = harness.conv(f"burst-{'loaded' if loaded else 'idle'}")
    handle = await harness.client.start_workflow(
        CONVERSATION_WORKFLOW, id=conversation, task_queue=harness.task_queue
    )
    sem = asyncio.Semaphore(32)
    refused: list[str] = []

    async def one(n: int) -> None:
        async with sem:
            try:
                await handle.signal("submitMessages", {"messages": "nope", "n": n})
            except RPCError as e:
                refused.append(e.message)

    await asyncio.gather(*(one(n) for n in range(10_000)))
    assert len(refused) == 10_000 - SIGNALS_PER_RUN, len(refused)
    assert "limit for signal" in refused[0], refused[0]
    with busy_cores() if loaded else contextlib.nullcontext():
        harness.start_worker()
        result = await asyncio.wait_for(
            harness.send(conversation, "still there?", model="demo:echo"), 120
        )
    assert result.status == "completed", result
    state = await harness.turns.state(conversation)
    assert state.rejected_count == SIGNALS_PER_RUN, state.rejected_count
    assert await _failed_tasks(handle) == []
    log = harness.workers[0].log_tail(200_000)
    assert "TMPRL1101" not in log and "Potential deadlock" not in log


async def test_a_burst_keeps_each_signal_in_its_order_in_a_replayed_run(
    harness: Harness,
) -> None:
    """A conversation with history, its worker gone, then a burst of three kinds of signal:
    the new worker replays the run and takes the burst in one activation; each signal acts
    in the order sent (a cancel finds the request before it; the request after it runs)."""
    first = harness.start_worker()
    conversation = harness.conv("folded-old")
    await harness.send(conversation, "hello", model="demo:echo")
    first.kill()
    handle = harness.client.get_workflow_handle(conversation)
    bad = [("submitMessages", {"messages": "nope", "n": i}) for i in range(200)]
    burst = [
        *bad,
        ("submitMessages", _asked("kept", "one")),
        ("submitMessages", _asked("dropped", "two")),
        ("cancelChat", {"request_id": "dropped"}),
        *bad,
        ("continueLastTurn", {"request_id": "went-on"}),
        ("submitMessages", _asked("last", "three")),
    ]
    for name, arg in burst:  # one at a time: the order sent is the order in the history
        await handle.signal(name, arg)
    harness.start_worker()
    results = {
        rid: await asyncio.wait_for(harness.turns.wait(conversation, rid), 60)
        for rid in ("kept", "dropped", "went-on", "last")
    }
    assert {rid: r.status for rid, r in results.items()} == {
        "kept": "completed",
        "dropped": "aborted",
        "went-on": "completed",
        "last": "completed",
    }
    assert [results[r].turn_number for r in ("kept", "went-on", "last")] == [2, 3, 4]
    state = await harness.turns.state(conversation)
    assert state.rejected_count == 400, state.rejected_count
    assert await _failed_tasks(handle) == []


async def test_a_burst_of_costly_tool_results_to_a_turn_with_the_cores_loaded(
    harness: Harness,
) -> None:
    """Issue 25 item 1, the turn's side. Old code: each ``toolResult`` signal's list was read
    in its handler; 120 lists of 6,500 results each (~15 ms to read, idle) in one activation ran
    past the deadlock detector with the cores loaded, and the turn's task failed on every
    retry. Now they are read a bounded amount per task and the turn gets its answer."""
    first = harness.start_worker()
    conversation = harness.conv("turn-burst")
    request = await harness.turns.submit(conversation, "where?", model=harness.script(LOCATE))
    [call] = await pending_calls(harness, conversation)
    first.kill()  # the burst arrives while no worker runs: one activation takes it all
    turn = harness.client.get_workflow_handle(f"{conversation}/turn-1")
    costly = [
        [{"tool_call_id": f"x{n}-{i}", "output": "z"} for i in range(6_500)] for n in range(120)
    ]
    assert len(json.dumps(costly[0], separators=(",", ":"))) < 262_144
    sem = asyncio.Semaphore(32)

    async def one(arg: Any) -> None:
        async with sem:
            await turn.signal("toolResult", arg)

    await asyncio.gather(*(one(arg) for arg in costly))
    await turn.signal("toolResult", {"tool_call_id": call["tool_call_id"], "output": "Faro"})
    with busy_cores():
        harness.start_worker()
        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 90)
    assert result.status == "completed" and result.auto_continue, result.error
    assert await _failed_tasks(turn) == []


async def test_signals_and_updates_keep_their_order_through_the_inbox(harness: Harness) -> None:
    """A request sent as an update after signals still waiting in the inbox is queued after
    them: a cancel of a queued request finds it, and turns run in the order sent."""
    conversation = harness.conv("inbox-order")
    signals = [
        (
            "submitMessages",
            {
                "messages": [{"role": "user", "content": f"s{i}"}],
                "model": "demo:echo",
                "request_id": f"s{i}",
            },
        )
        for i in range(5)
    ]
    signals.append(("cancelChat", {"request_id": "s3"}))
    handle = await _signals_in_one_activation(harness, conversation, [])
    for name, arg in signals:  # in order
        await handle.signal(name, arg)
    harness.start_worker()
    last = await asyncio.wait_for(harness.send(conversation, "u", model="demo:echo"), 60)
    assert last.status == "completed" and last.text == "You said: u"
    state = await harness.turns.state(conversation)
    by_id = {r.request_id: r for r in state.recent}
    assert by_id["s3"].status == "aborted"
    numbers = [by_id[f"s{i}"].turn_number for i in (0, 1, 2, 4)]
    assert numbers == sorted(numbers) and last.turn_number == max(numbers) + 1


async def test_an_oversized_update_with_the_codec_on(harness: Harness) -> None:
    """With every payload encrypted, the client's bound measures the update before encryption:
    the margin under the blob limit covers what encryption adds."""
    import base64
    import os

    from temporalio.client import Client

    from durable_turns.client import TurnsClient
    from durable_turns.codec import ENV_KEYS, data_converter_from_env

    keys = f"k1:{base64.b64encode(os.urandom(32)).decode()}"
    harness.start_worker(**{ENV_KEYS: keys})
    client = await Client.connect(
        harness.address,
        namespace=harness.client.namespace,
        data_converter=data_converter_from_env({ENV_KEYS: keys}),
        interceptors=[update_bound()],
    )
    turns = TurnsClient(client, harness.task_queue)
    conversation = harness.conv("huge-encrypted")
    assert (await turns.send(conversation, "one", model="demo:echo")).turn_number == 1
    handle = client.get_workflow_handle(conversation)
    for size in (3_400_000, 1_900_000):  # refused by the client, then by the validator
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await asyncio.wait_for(handle.execute_update("sendMessage", _request(size)), 10)
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "RequestTooLarge"
    assert (await turns.send(conversation, "two", model="demo:echo")).turn_number == 2
    assert await _failed_tasks(handle) == []
