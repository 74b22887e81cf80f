"""Fuzzing the wire, briefly (issue 25, item 8): every target of ``testkit/fuzz_targets.py``
for a few dozen examples each, derandomized (the same examples on every run), then each
crash the fuzzing found, as a plain example. ``python -m bench fuzz`` is the long run."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

from durable_turns.activities.errors import provider_failure
from durable_turns.codec import KeyConfigError, parse_keys
from durable_turns.contract import INVALID_PAYLOAD
from durable_turns.messages import Message
from durable_turns.models.base import ModelRequest, ProviderError
from durable_turns.models.providers import MAX_RETRY_AFTER_S, retry_after
from durable_turns.streams import STEP_FINISH, TOOL_RESULT, StreamEvent
from durable_turns.web import protocol
from durable_turns.web.requests import BadRequest, parse_chat_request
from durable_turns.workflows.conversation import ConversationWorkflow
from durable_turns.workflows.intake import Rejected, decode
from testkit import fuzz_targets
from testkit.fuzz_targets import TARGETS, ContractBroken, Target, within, workflow_context

CI = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_every_decoder_keeps_its_contract(target: Target) -> None:
    given(target.inputs)(settings(CI, max_examples=target.examples)(target.check))()


# --- what the fuzzing found, one example each -----------------------------------------------


def test_a_tool_result_of_raw_bytes_is_rejected_not_a_failed_task() -> None:
    """``submitToolResult`` with a ``binary/plain`` payload (what an SDK sends for ``bytes``)
    that is not UTF-8: intake decoded it to bytes, and the handler's re-encoding raised, which
    fails the conversation's workflow task on every retry. Only ``json/plain`` is a request."""
    raw = RawValue(Payload(metadata={"encoding": b"binary/plain"}, data=b"\x80"))
    with workflow_context():
        with pytest.raises(Rejected) as caught:
            decode(raw, 1024)
        assert caught.value.type == INVALID_PAYLOAD
        assert "not JSON" in caught.value.message
        wf = ConversationWorkflow(None)
        wf._turn = fuzz_targets._FakeChild()  # type: ignore[assignment]
        wf.machine.turn_running = True

        async def signal() -> None:  # through the inbox, as a worker takes it
            wf.submit_tool_result(raw)
            await fuzz_targets._settled(wf)

        asyncio.run(signal())
        assert wf.state().rejected_count == 1
        assert wf.state().recent[-1].error.type == INVALID_PAYLOAD  # type: ignore[union-attr]


def _stream(api: str, body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Any:
    replay = fuzz_targets._PROVIDERS.replay
    replay.status, replay.headers, replay.body, replay.cuts = status, headers or {}, body, [3]
    loop, provider = fuzz_targets._PROVIDERS.get(api)
    model = "gpt@responses" if api == "responses" else "m"
    request = ModelRequest(model=model, messages=[Message(role="user", content="hi")])
    return loop.run_until_complete(fuzz_targets._drain(provider, request))


@pytest.mark.parametrize(
    ("api", "body", "named"),
    [
        ("anthropic", b'event: message_start\ndata: {"type":"message_sta\n\n', "JSONDecodeError"),
        ("anthropic", b"event: message_start\ndata: \xff\xfe\n\n", "UnicodeDecodeError"),
        (
            "anthropic",
            b'event: message_start\ndata: {"type":"message_start","message":{"id":"x",'
            b'"model":"m","usage":{"input_tokens":"7"}}}\n\n'
            b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
            "TypeError",
        ),
        (
            "chat",
            b'data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":"x"}]},'
            b'"finish_reason":"stop"}]}\n\n',
            "ValueError",
        ),
        (
            "chat",
            b'data: {"id":"c","choices":[{"index":0,"delta":{"content":5},'
            b'"finish_reason":"stop"}]}\n\n',
            "ValidationError",
        ),
        (
            "responses",
            b'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
            b'"item":{"type":"reasoning","id":"\\ud800"}}\n\n'
            b'event: response.output_item.done\ndata: {"type":"response.output_item.done",'
            b'"item":{"type":"reasoning","id":"\\ud800"}}\n\n',
            "PydanticSerializationError",
        ),
    ],
    ids=[
        "truncated-json",
        "not-utf8",
        "usage-as-text",
        "index-as-text",
        "content-as-number",
        "lone-surrogate-in-metadata",
    ],
)
def test_a_stream_the_engine_cannot_read_is_a_transient_provider_error(
    api: str, body: bytes, named: str
) -> None:
    """Before, each of these escaped the provider as the exception itself (JSONDecodeError,
    TypeError …): an activity failure of no type the engine knows, or a chunk that could not
    be stored."""
    with pytest.raises(ProviderError) as caught:
        _stream(api, body)
    assert caught.value.kind == "transient"
    assert "cannot read" in str(caught.value) and named in str(caught.value)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("nan", None),
        ("inf", MAX_RETRY_AFTER_S),
        ("1e400", MAX_RETRY_AFTER_S),
        ("Wed, 21 Oct 9999 07:28:00 GMT", MAX_RETRY_AFTER_S),
        ("Wed, 21 Oct 99999 07:28:00 GMT", None),
        ("2.5", 2.5),
    ],
)
def test_retry_after_is_a_bounded_number_of_seconds(value: str, seconds: float | None) -> None:
    """A gateway's ``retry-after: nan`` made the activity's failure raise (``timedelta``
    of NaN), ``inf`` overflowed, a year-9999 date waited for ever, year 99999 raised."""
    assert retry_after({"retry-after": value}) == seconds
    error = ProviderError("busy", kind="transient", retry_after=retry_after({"retry-after": value}))
    provider_failure(error)


@pytest.mark.parametrize(
    "body",
    [
        b'{"id": "c1", "messages": [], "custom": {"\\ud800": null}}',
        b'{"id": "c1", "messages": [], "n": ' + b"1" * 5000 + b"}",
        b'{"id": "c1", "messages": [{"id": "m", "role": "user", "metadata": "\\udc00",'
        b' "parts": [{"type": "text", "text": "hi"}]}]}',
    ],
    ids=["surrogate-in-body", "5000-digit-number", "surrogate-in-metadata"],
)
def test_the_front_door_refuses_json_the_engine_could_not_take(body: bytes) -> None:
    """Python's ``json`` read these and the request failed with a 500 where it was sent on
    (or, for the number, where it was read): now a typed 400, as the engine would say."""
    with pytest.raises(BadRequest) as caught:
        parse_chat_request(body)
    assert (caught.value.status, caught.value.code) == (400, "InvalidPayload")


def test_stored_messages_with_foreign_metadata_render_and_nan_becomes_null() -> None:
    """A client may store a message of any role with any metadata: ``turn_number`` as text,
    ``sources`` as a list, ``approvals`` as a bool each made ``GET /messages`` a 500; a tool
    call's ``Infinity`` (the engine's parser accepts it) made JSON a browser refuses."""
    messages = [
        Message(
            role="assistant",
            parts=[  # type: ignore[list-item]
                {"type": "step-start"},
                {"type": "tool-call", "tool_call_id": "a", "tool_name": "t", "input": {"x": 1e999}},
            ],
            metadata={"turn_number": ":", "sources": [None], "approvals": True},
        ),
        Message(role="user", content="hi", metadata={"ui_message_id": {"a": 1}}),
    ]
    body = protocol.dumps(protocol.ui_messages(messages))
    rendered = json.loads(body)
    assert rendered[0]["parts"][1]["input"] == {"x": None}
    assert rendered[1]["id"] == ""  # not the object: the stored id


def test_a_stream_event_of_a_foreign_shape_makes_frames_a_browser_reads() -> None:
    stream = protocol.UIMessageStream("c/turn-1/assistant")
    stream.begin_turn(1)
    stream.feed(StreamEvent(offset=0, type=STEP_FINISH, data={"finish_reason": []}))
    chunks = stream.feed(
        StreamEvent(offset=1, type=TOOL_RESULT, data={"tool_call_id": "a", "output": float("nan")})
    )
    frame = protocol.frame(chunks[-1])
    assert json.loads(frame[6:]) == {
        "type": "tool-output-available",
        "toolCallId": "a",
        "output": None,
    }
    assert json.loads(protocol.frame({"text": "\ud800"})[6:]) == {"text": "\ud800"}


@pytest.mark.parametrize(
    "spec",
    [
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=:k1",
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8:",
        "c2VjcmV0LXNlY3JldC1zZWNyZXQ=:k1,k1:c2VjcmV0LXNlY3JldC1zZWNyZXQ=",
    ],
)
def test_a_key_written_where_its_id_goes_is_not_shown(spec: str) -> None:
    """``<key>:<id>`` (the wrong way round) printed the key as a bad key id."""
    with pytest.raises(KeyConfigError) as caught:
        parse_keys(spec)
    for entry in spec.split(","):
        for piece in entry.split(":"):
            if len(piece) >= 12:
                assert piece not in str(caught.value)


def test_an_examples_budget_is_its_cpu_and_a_hang_is_its_wall_time() -> None:
    """``within``: work past the CPU budget breaks the contract, and so does a wait past the
    hang bound; a wait longer than the CPU budget alone (the machine busy with other work,
    the example waiting for a core) does not."""
    with pytest.raises(ContractBroken, match="unbounded work"):
        with within(budget_s=0.05, hang_s=10):
            deadline = time.process_time() + 0.2
            while time.process_time() < deadline:
                pass
    with pytest.raises(ContractBroken, match="a hang"):
        with within(budget_s=0.05, hang_s=0.1):
            time.sleep(0.2)
    with within(budget_s=0.05, hang_s=10):
        time.sleep(0.2)
