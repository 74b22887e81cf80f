"""Issue 12: nothing wedges a conversation, nothing it accepted is lost.

Each test runs against the real dev server and a real worker process, and fails on the code
before the fix (named in its docstring).
"""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from durable_turns import cli
from durable_turns.client import TurnsClient
from durable_turns.codec import ENV_KEYS, data_converter_from_env
from durable_turns.contract import (
    MAX_MODEL_ID_BYTES,
    MAX_QUEUED_REQUESTS,
    MAX_TOOL_RESULT_BYTES,
    ConversationState,
    InvalidId,
    TurnInput,
)
from durable_turns.devserver import SIGNALS_PER_RUN
from durable_turns.workflows import options
from testkit.faultproxy import FaultProxy
from tests.support.harness import Harness
from tests.support.history import local_activity_marker

KEY = base64.b64encode(b"k" * 32).decode()


def _json(data: bytes) -> RawValue:
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=data))


async def _eventually(check: Any, within_s: float = 15.0) -> Any:
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        try:
            return await check()
        except (AssertionError, RPCError):
            if asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(0.2)


async def _signal_all(handle: WorkflowHandle[Any, Any], name: str, args: list[Any]) -> None:
    sem = asyncio.Semaphore(64)

    async def one(arg: Any) -> None:
        async with sem:
            await handle.signal(name, arg)

    await asyncio.gather(*(one(a) for a in args))


async def _start_idle(harness: Harness, conversation: str) -> WorkflowHandle[Any, Any]:
    """A conversation started with no request (no worker needs to run yet)."""
    return await harness.client.start_workflow(
        "ConversationWorkflow", id=conversation, task_queue=harness.task_queue
    )


# --- 1. turn-id squatting ----------------------------------------------------------------


async def test_a_squatted_turn_id_does_not_kill_the_conversation(harness: Harness) -> None:
    """Old code: start_child_workflow raised WorkflowAlreadyStartedError and the
    conversation failed, losing its queue."""
    harness.start_worker()
    victim = harness.conv("victim")
    assert (await harness.send(victim, "one", model="demo:echo")).turn_number == 1
    # Something else runs under the victim's next turn id (here: a slow, direct turn).
    slow = harness.script(
        [{"tool_calls": [{"name": "slow", "input": {"seconds": 30}}]}, {"text": "done"}]
    )
    squatter = await harness.client.start_workflow(
        "TurnWorkflow",
        TurnInput(conversation_id=harness.conv("elsewhere"), model=slow),
        id=f"{victim}/turn-2",
        task_queue=harness.task_queue,
    )
    try:
        result = await asyncio.wait_for(harness.send(victim, "two", model="demo:echo"), 20)
        assert result.status == "completed" and result.text == "You said: two"
        assert result.turn_number == 2
        state = await harness.turns.state(victim)
        [record] = [r for r in state.recent if r.turn_number == 2]
        assert record.workflow_id and record.workflow_id.startswith(f"{victim}/turn-2~")
        assert (await harness.send(victim, "three", model="demo:echo")).turn_number == 3
    finally:
        await squatter.terminate()


async def test_turn_id_pattern_is_refused_at_every_edge(harness: Harness) -> None:
    """Old code: a conversation could be started under another conversation's turn id."""
    harness.start_worker()
    with pytest.raises(InvalidId, match="reserved for turn ids"):
        await harness.send("someone/turn-7", "hi", model="demo:echo")
    with pytest.raises(InvalidId):
        await harness.turns.submit("someone/turn-7", "hi")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["state", "someone/turn-7"])
    assert exit_info.value.code == 2
    # a raw Temporal client can still start one: it fails at once with a clear error
    squat = f"{harness.conv('v')}/turn-1"
    handle = await harness.client.start_workflow(
        "ConversationWorkflow",
        id=squat,
        task_queue=harness.task_queue,
        start_signal="submitMessages",
        start_signal_args=[{"messages": [{"role": "user", "content": "x"}]}],
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), 15)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidId"


# --- 7. ids near Temporal's limits ---------------------------------------------------------


async def test_ids_are_validated_at_the_edges(harness: Harness) -> None:
    """Old code: a 990-byte conversation id made the derived turn id overflow Temporal's
    1,000-byte limit, and the conversation wedged."""
    harness.start_worker()
    for bad in ["x" * 990, "a\x00b", "tab\there", ""]:
        with pytest.raises(InvalidId):
            await harness.turns.submit(bad or "", "hi")
    with pytest.raises(InvalidId):
        harness.turns.request("hi", request_id="r\x01")
    long_id = "y" * 990
    handle = await harness.client.start_workflow(
        "ConversationWorkflow",
        id=long_id + uuid.uuid4().hex[:8],
        task_queue=harness.task_queue,
        start_signal="submitMessages",
        start_signal_args=[{"messages": [{"role": "user", "content": "x"}]}],
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), 15)
    assert "limit is 512 bytes" in str(failed.value.cause)
    # a bad request id inside a request is a typed rejection, the conversation goes on
    conversation = harness.conv("ids")
    await harness.client.start_workflow(
        "ConversationWorkflow",
        id=conversation,
        task_queue=harness.task_queue,
        start_signal="submitMessages",
        start_signal_args=[
            {"messages": [{"role": "user", "content": "x"}], "request_id": "r\x00" + "z" * 600}
        ],
    )
    assert (await harness.send(conversation, "ok", model="demo:echo")).turn_number == 1
    state = await harness.turns.state(conversation)
    assert state.rejected_count == 1
    [rejected] = [r for r in state.recent if r.status == "rejected"]
    assert rejected.error is not None and "request id" in rejected.error.message


# --- 8. size limits ------------------------------------------------------------------------


async def test_every_input_has_a_size_limit(harness: Harness) -> None:
    """Old code: submitToolResult had no cap, a 1 MB sendMessage was parsed (and echoed back)
    before rejection, and a 3 KiB model id was accepted (the turn was then terminated at the
    TurnModel search-attribute upsert)."""
    harness.start_worker()
    conversation = harness.conv("sizes")
    assert (await harness.send(conversation, "first", model="demo:echo")).status == "completed"
    handle = harness.turns.conversation(conversation)
    big = "x" * (MAX_TOOL_RESULT_BYTES + 10)
    await handle.signal("submitToolResult", {"tool_call_id": "t1", "output": big})
    with pytest.raises(WorkflowUpdateFailedError) as too_big:
        await handle.execute_update(
            "sendMessage", {"messages": [{"role": "user", "content": "y" * 1_000_000}]}
        )
    cause = too_big.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "RequestTooLarge"
    assert len(str(cause)) < 500, "the rejection does not echo the request"
    with pytest.raises(WorkflowUpdateFailedError) as long_model:
        await harness.send(conversation, "hi", model="m" * (MAX_MODEL_ID_BYTES * 12))
    assert "model id is" in str(long_model.value.cause)
    state = await harness.turns.state(conversation)
    types = [r.error.type for r in state.recent if r.status == "rejected" and r.error]
    assert types == ["RequestTooLarge"]
    assert (await harness.send(conversation, "still", model="demo:echo")).turn_number == 2


# --- 5. bursts -------------------------------------------------------------------------------


async def test_a_burst_of_signals_leaves_the_conversation_working(harness: Harness) -> None:
    """Scaled down from bench.robustness (10,000 each; one run takes 2,500 signals). Old code: every rejection logged,
    set details and trimmed records in O(n); a burst delivered in one activation hit the
    deadlock detector on every retry. Valid requests past the queue bound were admitted
    without limit."""
    conversation = harness.conv("burst")
    handle = await _start_idle(harness, conversation)
    valid = [
        {"messages": [{"role": "user", "content": f"v{i}"}], "model": "demo:echo"}
        for i in range(MAX_QUEUED_REQUESTS + 100)
    ]
    # as many as one run takes (the server refuses signals past SIGNALS_PER_RUN to senders)
    malformed = [{"messages": "nope", "n": i} for i in range(SIGNALS_PER_RUN - len(valid) - 100)]
    await _signal_all(handle, "submitMessages", malformed + valid)
    harness.start_worker()  # the whole burst arrives in one activation

    async def settled() -> ConversationState:
        state = await harness.turns.state(conversation)
        assert state.turn_count >= 2
        return state

    state = await _eventually(settled, 25)
    assert state.rejected_count == len(malformed) + 100
    assert state.queued_count <= MAX_QUEUED_REQUESTS
    kinds = {r.error.type for r in state.recent if r.status == "rejected" and r.error}
    assert kinds == {"QueueFull"}  # the last rejections shown are the overflow
    await handle.terminate()


# --- 6. undecodable payloads --------------------------------------------------------------


async def test_undecodable_payloads_are_rejected_not_dropped(harness: Harness) -> None:
    """Old code: the SDK dropped these before any handler ran; nothing was recorded."""
    harness.start_worker()
    conversation = harness.conv("undecodable")
    handle = await _start_idle(harness, conversation)
    bad = [
        _json(b"this is not json"),
        _json(b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'),
        _json(b'{"messages": [{"role": "user", "content": "\\ud800"}]}'),
        _json(b"[" * 100_000 + b"]" * 100_000),
    ]
    for raw in bad:
        await handle.signal("submitMessages", raw)
    assert (await harness.send(conversation, "fine", model="demo:echo")).turn_number == 1
    state = await harness.turns.state(conversation)
    assert state.rejected_count == 4
    assert {r.error.type for r in state.recent if r.error and r.status == "rejected"} == {
        "InvalidPayload"
    }


async def test_an_undecryptable_signal_is_rejected_with_the_codec_on(harness: Harness) -> None:
    """Old code: the codec raised while decoding the activation, so every workflow task of
    the conversation failed, forever."""
    keys = f"k1:{KEY}"
    harness.start_worker(**{ENV_KEYS: keys})
    client = await Client.connect(
        harness.address,
        namespace=harness.client.namespace,
        data_converter=data_converter_from_env({ENV_KEYS: keys}),
    )
    turns = TurnsClient(client, harness.task_queue)
    conversation = harness.conv("tampered")
    assert (await turns.send(conversation, "one", model="demo:echo")).turn_number == 1
    forged = Payload(
        metadata={"encoding": b"binary/encrypted", "encryption-key-id": b"k1"}, data=os.urandom(64)
    )
    # sent by a client without the codec, so it reaches the worker exactly as forged
    await harness.client.get_workflow_handle(conversation).signal(
        "submitMessages", RawValue(forged)
    )
    result = await asyncio.wait_for(turns.send(conversation, "two", model="demo:echo"), 20)
    assert result.turn_number == 2 and result.text == "You said: two"
    state = await turns.state(conversation)
    [rejected] = [r for r in state.recent if r.status == "rejected"]
    assert rejected.error is not None and rejected.error.type == "InvalidPayload"
    assert "could not be decrypted" in rejected.error.message


# --- 3. long queues ---------------------------------------------------------------------------


async def _run_lengths(harness: Harness, workflow_id: str) -> list[int]:
    lengths = []
    async for execution in harness.client.list_workflows(f'WorkflowId="{workflow_id}"'):
        handle = harness.client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        lengths.append(len((await handle.fetch_history()).events))
    return lengths


async def test_a_long_queue_continues_as_new_while_queued(harness: Harness) -> None:
    """Old code: continue-as-new only with an empty queue, so a steady queue grew one run's
    history without bound (to Temporal's 51,200-event termination)."""
    conversation = harness.conv("queue")
    handle = await _start_idle(harness, conversation)
    requests = [harness.turns.request(f"q{i}", model="demo:echo") for i in range(30)]
    await _signal_all(handle, "submitMessages", requests)
    harness.start_worker()
    last = await asyncio.wait_for(harness.send(conversation, "last", model="demo:echo"), 60)
    assert last.turn_number == 31
    done = [await harness.turns.wait(conversation, str(r["request_id"])) for r in requests]
    assert sorted(d.turn_number for d in done) == list(range(1, 31))
    assert all(d.status == "completed" for d in done)
    lengths = await _run_lengths(harness, conversation)
    assert len(lengths) >= 3, lengths
    assert max(lengths) < 150, f"a run's history grew with the queue: {lengths}"


async def test_admission_is_bounded_by_bytes_with_a_typed_queue_full(harness: Harness) -> None:
    """Old code: everything was admitted, and carried whole over continue-as-new."""
    conversation = harness.conv("full")
    handle = await _start_idle(harness, conversation)
    big = [harness.turns.request("z" * 200_000, model="demo:echo") for _ in range(3)]
    await _signal_all(handle, "submitMessages", big)
    harness.start_worker()
    state = await _eventually(lambda: _rejected(harness, conversation, 1))
    [rejected] = [r for r in state.recent if r.status == "rejected"]
    assert rejected.error is not None and rejected.error.type == "QueueFull"
    assert rejected.request_id in {str(r["request_id"]) for r in big}


async def _rejected(harness: Harness, conversation: str, n: int) -> ConversationState:
    state = await harness.turns.state(conversation)
    assert state.rejected_count == n
    return state


# --- 4. idempotency across continue-as-new ----------------------------------------------------


async def test_a_retried_update_gets_its_result_after_continue_as_new(harness: Harness) -> None:
    """Old code: results were not carried; the retried update waited forever."""
    harness.start_worker()
    conversation = harness.conv("retry")
    first = await harness.send(conversation, "remember me", model="demo:echo", request_id="r-1")
    # TurnResult.text is capped at 64 KiB: two replies that size overflow the carried
    # results' 128 KiB budget, and the older one is left behind
    huge = await harness.send(conversation, "h" * 150_000, model="demo:echo", request_id="r-2")
    await harness.send(conversation, "i" * 150_000, model="demo:echo", request_id="r-3")
    for i in range(8):  # past the test server's continue-as-new suggestion (60 events)
        await harness.send(conversation, f"filler {i}", model="demo:echo")
    assert len(await _run_lengths(harness, conversation)) >= 2
    again = await asyncio.wait_for(
        harness.send(conversation, "remember me", model="demo:echo", request_id="r-1"), 10
    )
    assert again == first
    # a result too large to carry: a typed error, not a hang
    assert huge.status == "completed"
    with pytest.raises(WorkflowUpdateFailedError) as expired:
        await asyncio.wait_for(
            harness.send(conversation, "again", model="demo:echo", request_id="r-2"), 10
        )
    cause = expired.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "RequestExpired"


# --- 9. store outages ---------------------------------------------------------------------------


async def test_a_store_outage_at_start_loses_nothing(harness: Harness) -> None:
    """Old code: open_conversation gave up after 10 attempts and the conversation failed
    with its first request; nothing said it was waiting for the store."""
    proxy = FaultProxy(("127.0.0.1", 5432)).start()
    schema = f"turns_test_{uuid.uuid4().hex[:12]}"
    url = f"postgresql://postgres@127.0.0.1:{proxy.port}/test?schema={schema}"
    try:
        await asyncio.to_thread(harness.start_worker, TURNS_STORE_URL=url)
        proxy.refuse()
        conversation = harness.conv("outage")
        send = asyncio.create_task(harness.send(conversation, "hello", model="demo:echo"))

        async def waiting() -> None:
            state = await harness.turns.state(conversation)
            assert state.waiting_for == "store"
            meta = await harness.turns.conversation(conversation).query(
                "__temporal_workflow_metadata"
            )
            assert "waiting for the store" in meta.current_details

        await _eventually(waiting, 15)
        await asyncio.sleep(3)
        assert not send.done()
        proxy.heal()
        result = await asyncio.wait_for(send, 40)
        assert result.status == "completed" and result.text == "You said: hello"
        history = await harness.turns.conversation(conversation).fetch_history()
        # it waited for the store inside one attempt, and a longer outage is retried forever
        [_opened] = [
            m
            for e in history.events
            if (m := local_activity_marker(e))
            and m["activity_type"].startswith("open_conversation")
        ]
        assert options.BOOKKEEPING_RETRY.maximum_attempts == 0, "retries until the store is back"
    finally:
        proxy.close()


# --- 10. message ids ------------------------------------------------------------------------------


async def test_message_ids_are_scoped_and_conflicts_rejected(harness: Harness) -> None:
    """Old code: a reused message id silently dropped the new message, and a planted id could
    overwrite another turn's assistant message."""
    harness.start_worker()
    conversation = harness.conv("msgids")
    one = [{"id": "m1", "role": "user", "content": "first"}]
    two = [{"id": "m1", "role": "user", "content": "second"}]
    from durable_turns.messages import Message

    await harness.send(conversation, [Message.model_validate(m) for m in one], model="demo:echo")
    await harness.send(conversation, [Message.model_validate(m) for m in two], model="demo:echo")
    texts = [m.text for m in await (await harness.store()).messages(conversation)]
    assert texts == ["first", "You said: first", "second", "You said: second"]
    # a planted id aimed at another turn's assistant message is refused
    planted = {"id": f"{conversation}/turn-3/assistant", "role": "user", "content": "evil"}
    handle = harness.turns.conversation(conversation)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("sendMessage", {"messages": [planted]})
    assert "message 0" in str(refused.value.cause)
    dup = [{"id": "a", "role": "user", "content": "x"}, {"id": "a", "role": "user", "content": "y"}]
    with pytest.raises(WorkflowUpdateFailedError) as duplicated:
        await handle.execute_update("sendMessage", {"messages": dup})
    assert "used twice" in str(duplicated.value.cause)
    third = await harness.send(conversation, "third", model="demo:echo")
    assert third.text == "You said: third"
