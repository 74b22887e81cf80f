"""The wire's decoders as fuzz targets: what a client or a provider can feed each, and the
contract each keeps (issue 25, item 8).

Every decoder either returns a value or raises its documented, typed error: never another
exception type, never a hang, and bounded time for bounded input. A :class:`Target` names
a decoder, the hypothesis strategy of its inputs (mostly near-valid shapes, mutated: a field
of the wrong type, a key dropped or added, JSON truncated, bytes that are not UTF-8, lone
surrogates, nesting at and past the parser's limit, payloads at the size limit to the byte,
huge deltas, events out of order) and ``check``, which raises :class:`ContractBroken` (or
lets the unexpected exception through) when the contract does not hold.

``tests/test_fuzz.py`` runs every target briefly (derandomized, in CI);
``python -m bench fuzz`` runs them long and writes ``bench/results/fuzz.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any
from unittest import mock

import anthropic
import httpx2
import openai
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import to_json
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from durable_turns import contract
from durable_turns.activities.errors import provider_failure
from durable_turns.client import TurnsClient
from durable_turns.codec import (
    ENCODING,
    METADATA_ENCODING,
    METADATA_KEY_ID,
    PYDANTIC_DATA_CONVERTER,
    EncryptionCodec,
    EncryptionKey,
    KeyConfigError,
    UnknownKeyError,
    parse_keys,
)
from durable_turns.contract import (
    INVALID_PAYLOAD,
    MAX_REQUEST_BYTES,
    MAX_TOOL_RESULT_BYTES,
    REQUEST_TOO_LARGE,
    UNDECRYPTABLE_ENCODING,
    CancelChat,
    ContinueLastTurn,
    ConversationInput,
    ConversationState,
    SubmitMessages,
    ToolOutcome,
    ToolResolution,
    TurnInput,
    id_problem,
)
from durable_turns.messages import FinishChunk, Message, Part, StreamPart, TextDelta
from durable_turns.models.anthropic import AnthropicProvider
from durable_turns.models.base import MAX_PROVIDER_MESSAGE_CHARS, ModelRequest, ProviderError
from durable_turns.models.openai import OpenAIProvider
from durable_turns.streams import (
    CHUNK,
    RESET,
    STEP_FINISH,
    STEP_START,
    TOOL_RESULT,
    TOOL_WAIT,
    TURN_FINISH,
    StreamEvent,
)
from durable_turns.web import protocol
from durable_turns.web.chat import engine_message, reply_turn, resolution
from durable_turns.web.door import FrontDoor
from durable_turns.web.requests import BadRequest, parse_chat_request
from durable_turns.workflows import conversation_machine
from durable_turns.workflows.conversation import ConversationWorkflow
from durable_turns.workflows.intake import Rejected, decode
from durable_turns.workflows.turn import TurnWorkflow

EXAMPLE_BUDGET_S = 5.0
"""One example of any target (inputs up to a few MB) must cost at most this much CPU, on a
loaded 2-core machine: a decoder that does not is unbounded, whatever it returns."""

HANG_BUDGET_S = 30.0
"""And must end within this much wall-clock time: a decoder that waits longer is a hang.
Apart from the CPU budget, because on a machine shared with other work a wait for the CPU
is not the input's cost (seen: an example at 5.4 s of wall time in a loaded CI run)."""

ERROR_TYPES = frozenset(
    {
        contract.INVALID_REQUEST,
        contract.INVALID_ID,
        contract.EMPTY_MESSAGE,
        contract.INVALID_PAYLOAD,
        contract.REQUEST_TOO_LARGE,
        contract.QUEUE_FULL,
        contract.REQUEST_EXPIRED,
        contract.MESSAGE_ID_CONFLICT,
    }
)
"""What a request may be refused with (``ApplicationError.type``, ``ErrorInfo.type``)."""


class ContractBroken(AssertionError):
    """A decoder answered outside its contract."""


@dataclass(frozen=True)
class Target:
    name: str
    decoders: str
    """What is fed, for the report."""
    inputs: st.SearchStrategy[Any]
    check: Callable[[Any], None]
    examples: int = 60
    """Examples in the short (CI) run; the long run multiplies them."""


@contextlib.contextmanager
def within(budget_s: float = EXAMPLE_BUDGET_S, hang_s: float = HANG_BUDGET_S) -> Iterator[None]:
    """The block costs at most ``budget_s`` of the process's CPU and ends within ``hang_s``."""
    started, cpu = time.monotonic(), time.process_time()
    yield
    took, spent = time.monotonic() - started, time.process_time() - cpu
    if spent > budget_s:
        raise ContractBroken(
            f"cost {spent:.1f} s of CPU (budget {budget_s} s): bounded input, unbounded work"
        )
    if took > hang_s:
        raise ContractBroken(f"took {took:.1f} s (at most {hang_s} s): bounded input, a hang")


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise ContractBroken(what)


# --- JSON, near-valid and mutated --------------------------------------------------------

SPECIAL_TEXT = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "a\nb",
        "\t",
        "/turn-1",
        "c/turn-2/assistant",
        "last",
        "é",
        "𝄞",
        "\u2028",
        "\ufeff",
        "a" * 129,
        "b" * 513,
        "ui-x",
        "tool-x",
        "data-x",
        "dynamic-tool",
        "null",
        "NaN",
        "{",
        "\\u0000",
    ]
)
SURROGATES = st.sampled_from(["\ud800", "a\udfff", "\udc00\ud83d"])
"""Lone surrogates: Python's ``json`` reads them from ``"\\ud800"``; UTF-8 has no bytes for them."""
TEXT = st.one_of(*[st.text(max_size=24)] * 12, *[SPECIAL_TEXT] * 7, SURROGATES)
INTS = st.one_of(
    st.integers(min_value=-3, max_value=3),
    st.integers(),
    st.sampled_from([2**31, 2**63, -(2**63) - 1, 2**64, 10**40]),
)
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.5, -0.0]))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)
"""Any JSON value (Python's view of one: NaN, infinities and lone surrogates included)."""


def loose(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly (7 in 8) a value of the right shape, sometimes anything at all."""
    return st.one_of(*[value] * 7, JSON)


@st.composite
def shaped(
    draw: st.DrawFn,
    required: dict[str, st.SearchStrategy[Any]],
    optional: dict[str, st.SearchStrategy[Any]] | None = None,
) -> dict[str, Any]:
    """A JSON object of a known shape, well-typed 9 times in 10; else broken one way: a
    field of any type, a required key dropped, or a key nobody knows added."""
    out = draw(st.fixed_dictionaries(required, optional=optional or {}))
    tweak = draw(st.sampled_from(["as-is"] * 27 + ["retype", "drop", "extra"]))
    if tweak == "retype" and out:
        out[draw(st.sampled_from(sorted(out)))] = draw(JSON)
    elif tweak == "drop" and required:
        out.pop(draw(st.sampled_from(sorted(required))), None)
    elif tweak == "extra":
        out[draw(TEXT)] = draw(JSON)
    return out


IDS = st.one_of(
    st.sampled_from(["m1", "m2", "req-1", "c1"]), st.sampled_from(["m1", "m2", "req-1", "c1"]), TEXT
)
PART = st.one_of(
    *[shaped({"type": st.just("text"), "text": TEXT})] * 4,
    shaped(
        {"type": st.just("reasoning")},
        {
            "text": TEXT,
            "signature": TEXT,
            "redacted_data": TEXT,
            "provider_metadata": st.dictionaries(TEXT, JSON, max_size=2),
        },
    ),
    shaped(
        {"type": st.just("tool-call"), "tool_call_id": IDS, "tool_name": TEXT},
        {"input": JSON, "provider_metadata": st.dictionaries(TEXT, JSON, max_size=2)},
    ),
    shaped(
        {"type": st.just("tool-result"), "tool_call_id": IDS, "tool_name": TEXT},
        {"output": JSON, "is_error": st.booleans()},
    ),
    shaped(
        {
            "type": st.just("file"),
            "media_type": st.sampled_from(["image/png", "text/plain", "application/pdf", ""]),
        },
        {"data": TEXT, "url": TEXT},
    ),
    shaped({"type": st.just("step-start")}),
    shaped({"type": st.sampled_from(["source", "bogus"])}, {"text": TEXT}),
)
METADATA = st.dictionaries(
    st.one_of(
        st.sampled_from(
            [
                "turn_number",
                "sources",
                "approvals",
                "superseded_by",
                "continuation",
                "ui_message_id",
            ]
        ),
        TEXT,
    ),
    JSON,
    max_size=3,
)
MESSAGE = st.one_of(
    *[
        shaped(
            {
                "role": st.sampled_from(["user"] * 4 + ["assistant", "system", "tool"]),
                "parts": st.lists(PART, min_size=1, max_size=4),
            },
            {"id": IDS, "metadata": METADATA},
        )
    ]
    * 3,
    shaped(
        {"role": st.just("user"), "content": st.one_of(TEXT, st.lists(PART, max_size=2))},
        {"id": IDS, "metadata": METADATA, "parts": st.lists(PART, max_size=1)},
    ),
)
SUBMIT = shaped(
    {"messages": st.lists(MESSAGE, min_size=1, max_size=4)},
    {
        "regenerate": st.one_of(st.just("last"), IDS),
        "request_id": IDS,
        "body": st.dictionaries(TEXT, JSON, max_size=3),
        "model": st.sampled_from(["demo:weather"] * 3 + ["anthropic:claude", "x" * 300, "a\x00b"]),
    },
)
CONTINUE = shaped({}, {"body": st.dictionaries(TEXT, JSON, max_size=3), "request_id": IDS})
CANCEL = shaped({}, {"request_id": IDS})
RESOLUTION = shaped(
    {"tool_call_id": IDS},
    {"output": JSON, "is_error": st.booleans(), "approved": st.booleans(), "reason": TEXT},
)
TOOL_RESULT_VALUE = st.one_of(RESOLUTION, st.lists(RESOLUTION, max_size=3))

NEST_DEPTHS = st.sampled_from([150, 199, 200, 201, 1000, 50_000])


@st.composite
def mutated(draw: st.DrawFn, data: bytes, limit: int = MAX_REQUEST_BYTES) -> bytes:
    """``data`` as it came, or damaged the ways a wire damages bytes (or an attacker does)."""
    how = draw(
        st.sampled_from(
            ["as-is"] * 21 + ["truncate", "flip", "not-utf8", "nest", "pad", "garbage", "empty"]
        )
    )
    if how == "truncate" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if how == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    if how == "not-utf8":
        i = draw(st.integers(0, len(data)))
        bad = draw(
            st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"])
        )
        return data[:i] + bad + data[i:]
    if how == "nest":
        depth = draw(NEST_DEPTHS)
        return b"[" * depth + data + b"]" * depth
    if how == "pad":  # valid JSON at the size limit, to the byte
        return data + b" " * max(0, limit - len(data) + draw(st.integers(-1, 1)))
    if how == "garbage":
        return draw(st.binary(max_size=64))
    if how == "empty":
        return b""
    return data


def encoded(value: Any, ensure_ascii: bool) -> bytes:
    """``value`` as JSON bytes as a client in any language could send it: lone surrogates
    as escapes, or (``ensure_ascii`` off) as the bytes of one (not UTF-8)."""
    text = json.dumps(value, ensure_ascii=ensure_ascii, allow_nan=True)
    return text.encode("utf-8", "surrogatepass")


ENCODINGS = st.sampled_from(
    [b"json/plain"] * 30
    + [b"binary/plain", b"binary/null", b"json/protobuf", b"bogus/x", None, UNDECRYPTABLE_ENCODING]
)


@st.composite
def raw_payloads(
    draw: st.DrawFn, values: st.SearchStrategy[Any], limit: int = MAX_REQUEST_BYTES
) -> Payload:
    """A signal's or update's argument as the worker receives it."""
    data = draw(mutated(encoded(draw(values), draw(st.booleans())), limit))
    encoding = draw(ENCODINGS)
    metadata: dict[str, bytes] = {}
    if encoding is not None:
        metadata["encoding"] = encoding
    if encoding == UNDECRYPTABLE_ENCODING:
        data = b""
        metadata["reason"] = draw(st.binary(max_size=300))
    return Payload(metadata=metadata, data=data)


# --- workflow handlers, outside a workflow -------------------------------------------------


_QUIET = logging.getLogger("durable_turns.fuzz")
_QUIET.propagate = False  # a rejection logs a warning; thousands of them say nothing here
_QUIET.addHandler(logging.NullHandler())


@contextlib.contextmanager
def workflow_context(workflow_id: str = "conv-fuzz") -> Iterator[None]:
    """What the handlers call of ``temporalio.workflow``, as a new (not replaying) run sees it:
    the handlers run as they do in a worker, only without the worker."""
    info = SimpleNamespace(
        workflow_id=workflow_id,
        parent=None,
        first_execution_run_id="run-fuzz",
        is_continue_as_new_suggested=lambda: False,
    )
    counter = iter(range(1, 1 << 62))

    async def no_op_activity(*_args: Any, **_kwargs: Any) -> None:
        await asyncio.sleep(0)

    async def wait_condition(check: Any, **_kwargs: Any) -> None:
        while not check():  # noqa: ASYNC110 - the workflow's condition, polled as the SDK does
            await asyncio.sleep(0)

    with mock.patch.multiple(
        workflow,
        info=lambda: info,
        uuid4=lambda: uuid.UUID(int=next(counter)),
        now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
        set_current_details=lambda _details: None,
        payload_converter=lambda: PYDANTIC_DATA_CONVERTER.payload_converter,
        logger=_QUIET,
        execute_local_activity=no_op_activity,
        wait_condition=wait_condition,
    ):
        yield


async def _settled(wf: Any) -> None:
    """Let the workflow's inbox drain to the end (each round ends with a local activity)."""
    for _ in range(10_000):
        if not wf._inbox.draining:
            return
        await asyncio.sleep(0)
    raise AssertionError("the inbox never drained")


def check_intake(payload: Payload) -> None:
    """``intake.decode``: a JSON value, or ``Rejected`` with a contract type."""
    with workflow_context(), within():
        try:
            decode(RawValue(payload), MAX_REQUEST_BYTES)
        except Rejected as e:
            expect(e.type in (INVALID_PAYLOAD, REQUEST_TOO_LARGE), f"rejected as {e.type!r}")
            expect(len(e.message) <= 400, "a rejection's message is not short")


class _FakeChild:
    """The running turn a conversation forwards tool results to."""

    def __init__(self) -> None:
        self.signals: list[Any] = []

    async def signal(self, name: str, value: Any) -> None:
        PYDANTIC_DATA_CONVERTER.payload_converter.to_payloads([value])  # as the SDK sends it
        self.signals.append(value)

    def cancel(self) -> None:
        pass


OPS = st.sampled_from(["submit", "send", "start", "continue", "cancel", "tool"])
CONVERSATION_IDS = st.sampled_from(["conv-fuzz"] * 8 + ["c/turn-1", "x" * 600, "a\x00b"])


@st.composite
def conversation_requests(draw: st.DrawFn) -> tuple[str, bool, list[tuple[str, Payload]]]:
    values = {
        "submit": SUBMIT,
        "send": SUBMIT,
        "start": SUBMIT,
        "continue": CONTINUE,
        "cancel": CANCEL,
        "tool": TOOL_RESULT_VALUE,
    }
    ops = draw(st.lists(OPS, min_size=1, max_size=6))
    requests = []
    for op in ops:
        limit = MAX_TOOL_RESULT_BYTES if op == "tool" else MAX_REQUEST_BYTES
        requests.append((op, draw(raw_payloads(values[op], limit))))
    return draw(CONVERSATION_IDS), draw(st.booleans()), requests


def _refused(error: ApplicationError) -> None:
    expect(error.type in ERROR_TYPES, f"refused with {error.type!r}: {error}")
    expect(error.non_retryable, "a refusal that the client would retry")


def check_conversation(given: tuple[str, bool, list[tuple[str, Payload]]]) -> None:
    """The conversation's signal and update handlers: a signal never raises (a malformed one
    is a rejected record); an update's validator refuses with a contract type, and what it
    accepts its handler takes; afterwards ``state``, continue-as-new's carry-over and every
    queued turn's input still encode and decode."""
    conversation_id, running, requests = given
    with workflow_context(conversation_id), within():
        wf = ConversationWorkflow(None)
        m = wf.machine
        m.state.turn_count = 0
        child = _FakeChild()
        if running:
            wf._turn = child  # type: ignore[assignment]
            m.turn_running = True

        async def drive() -> None:
            for op, payload in requests:
                raw = RawValue(payload)
                if op == "submit":
                    wf.submit_messages(raw)
                elif op == "continue":
                    wf.continue_last_turn(raw)
                elif op == "cancel":
                    wf.cancel_chat(raw)
                elif op == "tool":
                    wf.submit_tool_result(raw)
                else:
                    await _settled(wf)
                    try:
                        wf._validate_send(raw)
                    except ApplicationError as e:
                        _refused(e)
                        continue
                    try:
                        await wf._admit(raw)
                    except ApplicationError as e:
                        _refused(e)
                await asyncio.sleep(0)
            await _settled(wf)
            await asyncio.sleep(0)

        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(drive())
        finally:
            loop.close()
        queue = m.state.queue
        expect(m.queued_bytes == sum(p.size for p in queue), "queued bytes out of step")
        state = ConversationState.model_validate_json(to_json(wf.state()))
        expect(state.queued_count == len(queue), "state miscounts the queue")
        ConversationInput.model_validate_json(to_json(m.carry()))
        for number, pending in enumerate(queue, start=1):
            expect(pending.size <= contract.MAX_STORED_REQUEST_BYTES, "a request kept too large")
            turn = TurnInput(
                conversation_id=conversation_id,
                turn_number=number,
                request_id=pending.request_id,
                new_messages=pending.messages,
                continuation=pending.kind == "continue",
                body=pending.body,
                model=pending.model,
                regenerate=pending.regenerate,
            )
            TurnInput.model_validate_json(to_json(turn))
            conversation_machine.details(pending)
            conversation_machine.summary(number, conversation_id, pending.model, pending.kind)


@st.composite
def turn_tool_results(draw: st.DrawFn) -> tuple[bool, list[Payload]]:
    payloads = draw(
        st.lists(raw_payloads(TOOL_RESULT_VALUE, MAX_TOOL_RESULT_BYTES), min_size=1, max_size=4)
    )
    return draw(st.booleans()), payloads


def check_turn_tool_result(given: tuple[bool, list[Payload]]) -> None:
    """The turn's ``toolResult`` signal: never raises; what it keeps is sent on as JSON."""
    waiting, payloads = given
    with workflow_context("conv-fuzz/turn-1"), within():
        wf = TurnWorkflow()
        if waiting:
            for call_id in ("m1", "c1", ""):
                wf._pending[call_id] = ToolOutcome(
                    tool_call_id=call_id, tool_name="t", success=False, pending="client"
                )

        async def drive() -> None:
            for payload in payloads:
                wf.tool_result(RawValue(payload))
            await _settled(wf)

        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(drive())
        finally:
            loop.close()
        to_json(wf.state())
        for resolution_ in wf._resolutions.values():
            ToolResolution.model_validate_json(to_json(resolution_))
        expect(len(wf._rejected) <= 10, "rejections are not bounded")


# --- the contract's and the messages' models ------------------------------------------------

MODELS: dict[str, TypeAdapter[Any]] = {
    "SubmitMessages": TypeAdapter(SubmitMessages),
    "ContinueLastTurn": TypeAdapter(ContinueLastTurn),
    "CancelChat": TypeAdapter(CancelChat),
    "ToolResolution": TypeAdapter(ToolResolution),
    "Message": TypeAdapter(Message),
    "Part": TypeAdapter(Part),
    "StreamPart": TypeAdapter(StreamPart),
}
MODEL_INPUTS = {
    "SubmitMessages": SUBMIT,
    "ContinueLastTurn": CONTINUE,
    "CancelChat": CANCEL,
    "ToolResolution": RESOLUTION,
    "Message": MESSAGE,
    "Part": PART,
    "StreamPart": shaped(
        {
            "type": st.sampled_from(
                [
                    "text-delta",
                    "reasoning-delta",
                    "reasoning-end",
                    "source",
                    "tool-input-start",
                    "tool-input-delta",
                    "tool-call",
                    "tool-result",
                    "raw",
                    "finish",
                ]
            )
        },
        {
            "text": TEXT,
            "tool_call_id": IDS,
            "tool_name": TEXT,
            "delta": TEXT,
            "input": JSON,
            "output": JSON,
            "value": JSON,
            "finish_reason": st.sampled_from(["stop", "length", "tool-calls", "x"]),
            "usage": st.dictionaries(st.sampled_from(["input_tokens", "output_tokens"]), INTS),
            "url": TEXT,
        },
    ),
}


@st.composite
def model_inputs(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(MODELS)))
    return name, draw(mutated(encoded(draw(MODEL_INPUTS[name]), draw(st.booleans()))))


def check_models(given: tuple[str, bytes]) -> None:
    """A model from JSON bytes (as the payload converter and the stores decode it): a value
    or a ``ValidationError``; a value encodes again, to the same JSON."""
    name, data = given
    adapter = MODELS[name]
    with within():
        try:
            value = adapter.validate_json(data)
        except ValidationError:
            return
        first = adapter.dump_json(value)
        second = adapter.dump_json(adapter.validate_json(first))
        expect(first == second, f"{name} does not round-trip: {first[:200]!r} → {second[:200]!r}")
        if isinstance(value, Message):
            _ = value.text


# --- provider streams, through the real SDKs -----------------------------------------------

USAGE_A = shaped(
    {},
    {
        "input_tokens": INTS,
        "output_tokens": INTS,
        "cache_read_input_tokens": INTS,
        "cache_creation_input_tokens": INTS,
    },
)
BLOCK_TYPES = st.sampled_from(
    ["text", "thinking", "redacted_thinking", "tool_use", "server_tool_use", "bogus"]
)
INDEX = st.one_of(*[st.integers(0, 2)] * 9, JSON)
HUGE = st.sampled_from(["x" * (1 << 20), "é" * (1 << 18)])
"""A delta of a megabyte: bounded work per byte, however it comes."""
DELTA_TEXT = st.one_of(*[TEXT] * 11, HUGE)
ANTHROPIC_EVENTS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "message_start": shaped(
        {
            "message": shaped(
                {"id": TEXT, "model": TEXT, "usage": USAGE_A},
                {"type": st.just("message"), "role": st.just("assistant")},
            )
        }
    ),
    "content_block_start": shaped(
        {
            "index": INDEX,
            "content_block": shaped(
                {"type": BLOCK_TYPES},
                {
                    "text": TEXT,
                    "thinking": TEXT,
                    "signature": TEXT,
                    "data": TEXT,
                    "id": IDS,
                    "name": st.sampled_from(["get_weather", "json_output", ""]),
                    "input": JSON,
                },
            ),
        }
    ),
    "content_block_delta": shaped(
        {
            "index": INDEX,
            "delta": shaped(
                {
                    "type": st.sampled_from(
                        [
                            "text_delta",
                            "thinking_delta",
                            "signature_delta",
                            "input_json_delta",
                            "citations_delta",
                            "bogus",
                        ]
                    )
                },
                {
                    "text": DELTA_TEXT,
                    "thinking": DELTA_TEXT,
                    "signature": TEXT,
                    "partial_json": st.one_of(
                        DELTA_TEXT, st.sampled_from(['{"city": "Par', 'is"}', "{}", "[1,"])
                    ),
                },
            ),
        }
    ),
    "content_block_stop": shaped({"index": INDEX}),
    "message_delta": shaped(
        {
            "delta": shaped(
                {
                    "stop_reason": st.sampled_from(
                        ["end_turn", "tool_use", "max_tokens", "refusal", "pause_turn", None]
                    )
                },
                {"stop_sequence": TEXT},
            ),
            "usage": USAGE_A,
        }
    ),
    "message_stop": shaped({}),
    "ping": shaped({}),
    "error": shaped(
        {
            "error": shaped(
                {
                    "type": st.sampled_from(
                        ["overloaded_error", "api_error", "invalid_request_error", "bogus"]
                    ),
                    "message": TEXT,
                }
            )
        }
    ),
    "bogus_event": shaped({}, {"x": JSON}),
}
ANTHROPIC_ORDER = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
]

USAGE_O = shaped(
    {},
    {
        "prompt_tokens": INTS,
        "completion_tokens": INTS,
        "total_tokens": INTS,
        "prompt_tokens_details": shaped({}, {"cached_tokens": INTS}),
        "completion_tokens_details": shaped({}, {"reasoning_tokens": INTS}),
    },
)
CHAT_TOOL = shaped(
    {},
    {
        "index": INDEX,
        "id": IDS,
        "type": st.just("function"),
        "function": shaped({}, {"name": TEXT, "arguments": DELTA_TEXT}),
    },
)
CHAT_CHUNK = shaped(
    {
        "choices": st.lists(
            shaped(
                {"index": INDEX},
                {
                    "delta": shaped(
                        {},
                        {
                            "role": st.just("assistant"),
                            "content": DELTA_TEXT,
                            "reasoning_content": DELTA_TEXT,
                            "refusal": TEXT,
                            "tool_calls": st.lists(CHAT_TOOL, max_size=2),
                        },
                    ),
                    "finish_reason": st.sampled_from(
                        ["stop", "tool_calls", "length", "content_filter", "bogus", None]
                    ),
                },
            ),
            max_size=2,
        )
    },
    {"id": TEXT, "model": TEXT, "object": st.just("chat.completion.chunk"), "usage": USAGE_O},
)
RESPONSE = shaped(
    {"id": TEXT, "model": TEXT},
    {
        "status": st.sampled_from(["completed", "incomplete", "failed"]),
        "usage": shaped(
            {"input_tokens": INTS, "output_tokens": INTS},
            {
                "total_tokens": INTS,
                "input_tokens_details": shaped({}, {"cached_tokens": INTS}),
                "output_tokens_details": shaped({}, {"reasoning_tokens": INTS}),
            },
        ),
        "incomplete_details": shaped(
            {"reason": st.sampled_from(["max_output_tokens", "content_filter", "x"])}
        ),
        "error": shaped({"code": TEXT, "message": TEXT}),
    },
)
ITEM = shaped(
    {"type": st.sampled_from(["reasoning", "function_call", "message", "bogus"]), "id": IDS},
    {"call_id": IDS, "name": TEXT, "arguments": DELTA_TEXT, "encrypted_content": TEXT},
)
RESPONSES_EVENTS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "response.created": shaped({"response": RESPONSE}),
    "response.output_item.added": shaped({"item": ITEM}, {"output_index": INDEX}),
    "response.output_item.done": shaped({"item": ITEM}, {"output_index": INDEX}),
    "response.output_text.delta": shaped({"delta": DELTA_TEXT}, {"item_id": IDS}),
    "response.refusal.delta": shaped({"delta": DELTA_TEXT}),
    "response.reasoning_summary_text.delta": shaped({"delta": DELTA_TEXT}, {"item_id": IDS}),
    "response.reasoning_text.delta": shaped({"delta": DELTA_TEXT}),
    "response.reasoning_summary_part.done": shaped({}, {"item_id": IDS}),
    "response.function_call_arguments.delta": shaped({"item_id": IDS, "delta": DELTA_TEXT}),
    "response.completed": shaped({"response": RESPONSE}),
    "response.incomplete": shaped({"response": RESPONSE}),
    "response.failed": shaped({"response": RESPONSE}),
    "error": shaped({"code": TEXT, "message": TEXT}),
    "response.bogus": shaped({}, {"x": JSON}),
}
RESPONSES_ORDER = [
    "response.created",
    "response.output_item.added",
    "response.reasoning_summary_text.delta",
    "response.output_item.done",
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.output_item.done",
    "response.output_text.delta",
    "response.completed",
]


@st.composite
def _sequence(
    draw: st.DrawFn, events: dict[str, st.SearchStrategy[dict[str, Any]]], order: list[str]
) -> list[str]:
    """Event types: the usual order, or shuffled, repeated, cut short, or any at all."""
    how = draw(st.sampled_from(["usual"] * 5 + ["shuffled", "cut", "random"]))
    if how == "usual":
        return order
    if how == "shuffled":
        return draw(st.permutations(order))
    if how == "cut":
        return order[: draw(st.integers(0, len(order) - 1))]
    return draw(st.lists(st.sampled_from(sorted(events)), max_size=10))


@st.composite
def sse_bodies(draw: st.DrawFn, api: str) -> bytes:
    """One streamed response body, framed as Server-Sent Events."""
    frames: list[bytes] = []
    if api == "chat":
        chunks = draw(st.lists(CHAT_CHUNK, max_size=6))
        if draw(st.integers(0, 4)):  # mostly, the last chunk says why the step ended
            reason = draw(st.sampled_from(["stop", "tool_calls", "length", "content_filter"]))
            chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
        for chunk in chunks:
            data = encoded(chunk, draw(st.booleans()))
            frames.append(b"data: " + data + b"\n\n")
        if draw(st.booleans()):
            frames.append(b"data: [DONE]\n\n")
    else:
        events = ANTHROPIC_EVENTS if api == "anthropic" else RESPONSES_EVENTS
        order = ANTHROPIC_ORDER if api == "anthropic" else RESPONSES_ORDER
        for kind in draw(_sequence(events, order)):
            value = draw(events[kind])
            value.setdefault("type", kind)
            name = kind if draw(st.integers(0, 9)) else draw(st.sampled_from(sorted(events)))
            data = encoded(value, draw(st.booleans()))
            frames.append(b"event: " + name.encode() + b"\ndata: " + data + b"\n\n")
    body = b"".join(frames)
    return draw(mutated(body, limit=len(body) + 64))


@st.composite
def provider_replies(draw: st.DrawFn) -> tuple[str, int, dict[str, str], bytes, list[int]]:
    api = draw(st.sampled_from(["anthropic", "chat", "responses"]))
    status = draw(st.sampled_from([200] * 40 + [400, 401, 413, 429, 500, 529, 302]))
    if status == 200:
        body = draw(sse_bodies(api))
    else:
        error = shaped(
            {"error": shaped({"type": TEXT, "message": TEXT}, {"code": TEXT})},
            {"type": st.just("error"), "request_id": TEXT},
        )
        body = draw(mutated(encoded(draw(st.one_of(error, JSON)), True)))
    headers = draw(
        st.dictionaries(
            st.sampled_from(["retry-after", "retry-after-ms", "x-should-retry", "request-id"]),
            st.one_of(
                st.sampled_from(
                    [
                        "1.5",
                        "nan",
                        "inf",
                        "-inf",
                        "1e400",
                        "-3",
                        "true",
                        "false",
                        "",
                        "Wed, 21 Oct 2015 07:28:00 GMT",
                        "Wed, 21 Oct 9999 07:28:00 GMT",
                        "Wed, 21 Oct 99999 07:28:00 GMT",
                    ]
                ),
                st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
            ),
            max_size=3,
        )
    )
    cuts = draw(st.lists(st.integers(1, 64), max_size=6))
    return api, status, headers, body, cuts


class _Replay:
    """An in-process HTTP transport for the SDKs' own clients: each request gets the
    scripted status and body, in chunks of the scripted sizes (so a character, a line or an
    event is split across reads as a network splits it)."""

    def __init__(self) -> None:
        self.status = 200
        self.headers: dict[str, str] = {}
        self.body = b""
        self.cuts: list[int] = []

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        content_type = "text/event-stream" if self.status == 200 else "application/json"
        return httpx2.Response(
            self.status,
            headers={"content-type": content_type, **self.headers},
            content=self._chunks(),
        )

    async def _chunks(self) -> AsyncIterator[bytes]:
        body, i = self.body, 0
        for cut in self.cuts:
            if i >= len(body):
                break
            yield body[i : i + cut]
            i += cut
        if i < len(body):
            yield body[i:]


@dataclass
class _Providers:
    replay: _Replay = field(default_factory=_Replay)
    loop: asyncio.AbstractEventLoop | None = None
    anthropic: AnthropicProvider | None = None
    openai: OpenAIProvider | None = None

    def get(self, api: str) -> tuple[asyncio.AbstractEventLoop, Any]:
        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.new_event_loop()
            transport = httpx2.MockTransport(self.replay.handle)
            self.anthropic = AnthropicProvider(api_key="sk-ant-fuzz-key-0123456789")
            self.anthropic._client = anthropic.AsyncAnthropic(
                api_key="sk-ant-fuzz-key-0123456789",
                max_retries=0,
                http_client=httpx2.AsyncClient(transport=transport),
            )
            self.openai = OpenAIProvider(api_key="sk-fuzz-key-0123456789")
            self.openai._client = openai.AsyncOpenAI(
                api_key="sk-fuzz-key-0123456789",
                max_retries=0,
                http_client=httpx2.AsyncClient(transport=transport),
            )
        return self.loop, self.anthropic if api == "anthropic" else self.openai


_PROVIDERS = _Providers()


async def _drain(provider: Any, request: ModelRequest) -> list[StreamPart]:
    return [part async for part in provider.stream(request)]


def check_provider(given: tuple[str, int, dict[str, str], bytes, list[int]]) -> None:
    """A provider's stream, from the bytes the SDK reads: stream parts ending with exactly
    one ``FinishChunk``, each of which encodes (it goes on the chunk stream and into the
    store), or a ``ProviderError`` the activity can raise (its ``retry_after`` a delay
    Temporal takes); never another exception, never a hang."""
    api, status, headers, body, cuts = given
    replay = _PROVIDERS.replay
    replay.status, replay.headers, replay.body, replay.cuts = status, headers, body, cuts
    loop, provider = _PROVIDERS.get(api)
    model = "gpt-fuzz@responses" if api == "responses" else "fuzz-model"
    request = ModelRequest(
        model=model, messages=[Message(role="user", parts=[{"type": "text", "text": "hi"}])]
    )  # type: ignore[list-item]
    with within():
        try:
            parts = loop.run_until_complete(asyncio.wait_for(_drain(provider, request), 30))
        except ProviderError as e:
            expect(len(str(e)) <= MAX_PROVIDER_MESSAGE_CHARS, "a provider error too long")
            expect("fuzz-key" not in str(e), "a provider error shows the key")
            provider_failure(e)  # what the model step raises to Temporal
            return
    expect(bool(parts) and isinstance(parts[-1], FinishChunk), "the stream did not finish")
    expect(sum(isinstance(p, FinishChunk) for p in parts) == 1, "more than one finish")
    text = 0
    for part in parts:
        to_json(part)
        if isinstance(part, TextDelta):
            text += len(part.text)
    expect(text <= len(body), "more text came out than bytes went in")


# --- the codec -------------------------------------------------------------------------

_KEYS = [EncryptionKey("k2", bytes(range(32))), EncryptionKey("k1", bytes(range(32, 64)))]
CODEC = EncryptionCodec(_KEYS)
OLD_CODEC = EncryptionCodec([_KEYS[1]])


@st.composite
def codec_payloads(draw: st.DrawFn) -> tuple[Payload, Payload | None]:
    """A payload a history can hold: (as stored, the original when it is intact)."""
    original = Payload(
        metadata={"encoding": draw(ENCODINGS) or b"json/plain"},
        data=draw(st.one_of(st.binary(max_size=64), st.just(b'{"a": 1}'))),
    )
    how = draw(st.sampled_from(["intact", "intact-old", "plain", "tamper", "relabel", "junk"]))
    if how == "plain":
        return original, original
    sealed = (OLD_CODEC if how == "intact-old" else CODEC).encrypt(original)
    if how.startswith("intact"):
        return sealed, original
    if how == "tamper":
        data = draw(mutated(sealed.data, limit=len(sealed.data) + 8))
        if data == sealed.data:
            return sealed, original
        return Payload(metadata=dict(sealed.metadata), data=data), None
    if how == "relabel":
        key_id = draw(st.one_of(st.sampled_from([b"k1", b"k2", b"k9", b""]), st.binary(max_size=8)))
        metadata = {**sealed.metadata, METADATA_KEY_ID: key_id}
        if draw(st.booleans()):
            del metadata[METADATA_KEY_ID]
        intact = key_id == sealed.metadata[METADATA_KEY_ID] and METADATA_KEY_ID in metadata
        return Payload(metadata=metadata, data=sealed.data), original if intact else None
    metadata = {METADATA_ENCODING: ENCODING, METADATA_KEY_ID: draw(st.sampled_from([b"k1", b"k2"]))}
    return Payload(metadata=metadata, data=draw(st.binary(max_size=128))), None


def check_codec(given: tuple[Payload, Payload | None]) -> None:
    """``EncryptionCodec.decode``: the original payload back when it is intact, else the
    ``binary/undecryptable`` marker (a signal carrying it is rejected), or
    ``UnknownKeyError`` for a key id this process lacks; nothing else."""
    payload, original = given
    with within():
        try:
            [out] = asyncio.run(CODEC.decode([payload]))
        except UnknownKeyError as e:
            expect(original is None, "an intact payload under a known key was refused")
            expect(e.key_id not in CODEC.key_ids, f"known key id {e.key_id!r} called unknown")
            return
    if original is not None:
        expect(out == original, "an intact payload did not decode to itself")
    else:
        expect(
            out.metadata.get(METADATA_ENCODING) == UNDECRYPTABLE_ENCODING,
            "a damaged payload was not marked undecryptable",
        )
        with workflow_context():
            try:
                decode(RawValue(out), MAX_REQUEST_BYTES)
            except Rejected as e:
                expect(e.type == INVALID_PAYLOAD, f"an undecryptable payload rejected as {e.type}")
            else:
                raise ContractBroken("an undecryptable payload was not rejected")


KEY_MATERIAL = st.one_of(
    st.sampled_from(
        [
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8-_w==",
            "c2VjcmV0LXNlY3JldC1zZWNyZXQ=",
        ]
    ),
    TEXT,
)
KEY_SPECS = st.lists(
    st.tuples(
        st.one_of(st.sampled_from(["k1", "k2", "a.b-c_d"]), TEXT),
        st.sampled_from([":", "", "::"]),
        KEY_MATERIAL,
        st.booleans(),
    ),
    max_size=3,
).map(
    lambda entries: ",".join(
        f"{v}{sep}{k}" if reversed_ else f"{k}{sep}{v}" for k, sep, v, reversed_ in entries
    )
)
"""``<key id>:<base64 key>`` entries, some written the wrong way round."""


def check_key_spec(spec: str) -> None:
    """``TURNS_ENCRYPTION_KEYS``: keys, or a ``KeyConfigError`` that never shows a key
    (nor what could be one: a long key id, as a key written where its id goes)."""
    with within():
        try:
            keys = parse_keys(spec)
        except KeyConfigError as e:
            for entry in spec.split(","):
                key_id, _, material = entry.partition(":")
                for secret, least in ((material.strip(), 12), (key_id.strip(), 33)):
                    if len(secret) >= least:
                        expect(secret not in str(e), "a key configuration error shows a key")
            return
    expect(bool(keys) and len({k.key_id for k in keys}) == len(keys), "keys not unique")
    EncryptionCodec(keys)


# --- the browser front door ----------------------------------------------------------------

UI_PART = shaped(
    {
        "type": st.one_of(
            st.sampled_from(
                ["text", "file", "reasoning", "step-start", "tool-get_weather", "dynamic-tool"]
            ),
            TEXT,
        )
    },
    {
        "text": DELTA_TEXT,
        "url": st.one_of(
            st.sampled_from(["data:image/png;base64,iVBORw0K", "https://x.test/a.png"]), TEXT
        ),
        "mediaType": TEXT,
        "toolCallId": IDS,
        "state": st.sampled_from(
            ["output-available", "output-error", "approval-responded", "input-available"]
        ),
        "output": JSON,
        "errorText": TEXT,
        "approval": shaped({"approved": st.booleans()}, {"reason": TEXT}),
    },
)
UI_MESSAGE = shaped(
    {
        "id": st.one_of(IDS, st.just("c1/turn-1/assistant")),
        "role": st.sampled_from(["user", "assistant", "system"]),
        "parts": st.lists(UI_PART, max_size=3),
    },
    {"metadata": JSON},
)
CHAT_REQUEST = shaped(
    {"id": st.one_of(st.just("c1"), IDS), "messages": st.lists(UI_MESSAGE, max_size=3)},
    {
        "trigger": st.sampled_from(["submit-message", "regenerate-message", "x"]),
        "messageId": IDS,
        "model": TEXT,
        "last": JSON,
        "custom": JSON,
    },
)


@st.composite
def chat_requests(draw: st.DrawFn) -> tuple[str | None, bytes]:
    body = draw(mutated(encoded(draw(CHAT_REQUEST), draw(st.booleans())), limit=1 << 20))
    return draw(st.sampled_from([None, None, "alice", "b@b.test", "ü/x"])), body


def _sendable(value: Any) -> None:
    """What the front door hands the Temporal client encodes (else: a 500, not a 4xx)."""
    PYDANTIC_DATA_CONVERTER.payload_converter.to_payloads([value])


def check_chat_request(given: tuple[str | None, bytes]) -> None:
    """``POST /api/chat``'s mapping: a request the engine can be sent, or a ``BadRequest``
    with a 4xx status and a typed code; never anything else (a 500)."""
    principal, raw = given
    with within():
        try:
            request = parse_chat_request(raw)
            conv = FrontDoor.conversation(principal, request.id)
            _sendable(request.body)
            last = request.last
            if last is None:
                return
            if last.role == "user":
                message, request_id = engine_message(last)
                expect(id_problem(request_id, "request id") is None, "a bad request id made")
                sent = TurnsClient.request([message], body=request.body, request_id=request_id)
                _sendable(sent)
            elif last.role == "assistant":
                reply_turn(conv, last.id)
                for part in last.parts:
                    extra = part.extra
                    wait = {"waiting_for": "approval" if len(part.type) % 2 else "client"}
                    answer = resolution(
                        str(extra.get("toolCallId") or ""), wait, str(extra.get("state")), extra
                    )
                    _sendable(answer)
            if request.messageId is not None and request.trigger == "regenerate-message":
                _sendable(request.messageId)
        except BadRequest as e:
            expect(400 <= e.status < 500, f"status {e.status}")
            expect(bool(e.code) and len(e.message) <= 2000, "an untyped or long refusal")
            json.dumps(e.body())


STORED_PART = st.one_of(
    st.builds(dict, type=st.just("step-start")),
    st.builds(dict, type=st.just("text"), text=TEXT),
    st.builds(dict, type=st.just("reasoning"), text=TEXT, signature=st.one_of(st.none(), TEXT)),
    st.builds(dict, type=st.just("tool-call"), tool_call_id=IDS, tool_name=TEXT, input=JSON),
    st.builds(
        dict,
        type=st.just("tool-result"),
        tool_call_id=IDS,
        tool_name=TEXT,
        output=JSON,
        is_error=st.booleans(),
    ),
    st.builds(
        dict,
        type=st.just("file"),
        media_type=TEXT,
        data=st.one_of(st.none(), TEXT),
        url=st.one_of(st.none(), TEXT),
    ),
)
STORED_MESSAGES = st.lists(
    st.builds(
        dict,
        id=IDS,
        role=st.sampled_from(["user", "assistant", "system"]),
        parts=st.lists(STORED_PART, max_size=5),
        metadata=METADATA,
    ),
    max_size=4,
).map(lambda items: encoded(items, True))


def check_ui_messages(data: bytes) -> None:
    """Stored messages (as a client may have sent them: any metadata, any tool output) →
    the ``UIMessage[]`` of ``GET /messages``: a list a browser's ``JSON.parse`` reads."""
    try:
        messages = TypeAdapter(list[Message]).validate_json(data)
    except ValidationError:
        return
    with within():
        body = protocol.dumps(protocol.ui_messages(messages))
    _browser_json(body)


def _browser_json(body: bytes) -> None:
    """``body`` is JSON as a browser reads it: UTF-8, no NaN or Infinity."""
    text = body.decode("utf-8")
    json.loads(text, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ContractBroken(f"{name} is not JSON: a browser's JSON.parse refuses it")


EVENT_TYPES = st.sampled_from(
    [CHUNK] * 4 + [RESET, STEP_START, STEP_FINISH, TOOL_RESULT, TOOL_WAIT, TURN_FINISH]
)
CHUNK_DATA = st.one_of(
    st.builds(dict, type=st.just("text-delta"), text=DELTA_TEXT),
    st.builds(dict, type=st.just("reasoning-delta"), text=TEXT),
    st.builds(dict, type=st.just("reasoning-end")),
    st.builds(dict, type=st.just("tool-input-start"), tool_call_id=IDS, tool_name=TEXT),
    st.builds(dict, type=st.just("tool-input-delta"), tool_call_id=IDS, delta=TEXT),
    st.builds(dict, type=st.just("tool-call"), tool_call_id=IDS, tool_name=TEXT, input=JSON),
    st.builds(
        dict,
        type=st.just("source"),
        id=TEXT,
        url=st.one_of(st.none(), TEXT),
        title=st.one_of(st.none(), TEXT),
    ),
)
EVENT_DATA = {
    CHUNK: CHUNK_DATA,
    RESET: st.just({}),
    STEP_START: st.just({}),
    STEP_FINISH: st.fixed_dictionaries({}, optional={"finish_reason": loose(TEXT)}),
    TOOL_RESULT: st.fixed_dictionaries(
        {"tool_call_id": IDS},
        optional={
            "output": JSON,
            "is_error": st.booleans(),
            "approval": st.fixed_dictionaries(
                {"approved": st.booleans()}, optional={"reason": TEXT}
            ),
        },
    ),
    TOOL_WAIT: st.fixed_dictionaries(
        {"tool_call_id": IDS}, optional={"waiting_for": st.sampled_from(["approval", "client"])}
    ),
    TURN_FINISH: st.fixed_dictionaries(
        {},
        optional={
            "status": st.sampled_from(["completed", "error", "aborted", "skipped"]),
            "continued_by_turn": st.one_of(st.integers(0, 3), JSON),
            "error": st.fixed_dictionaries({}, optional={"message": JSON}),
        },
    ),
}


@st.composite
def stream_events(draw: st.DrawFn) -> tuple[bool, list[tuple[int, StreamEvent]]]:
    """A reply's events as a stream holds them: any order (retries, lost workers), any
    attempt, adversarial content (model output, client tool output)."""
    out = []
    for offset in range(draw(st.integers(0, 12))):
        kind = draw(EVENT_TYPES)
        event = StreamEvent(
            offset=offset,
            type=kind,
            data=draw(EVENT_DATA[kind]),
            step=draw(st.one_of(st.none(), st.integers(0, 2))),
            attempt=draw(st.one_of(st.none(), st.integers(1, 3))),
        )
        out.append((draw(st.integers(1, 2)), event))
    return draw(st.booleans()), out


def check_ui_stream(given: tuple[bool, list[tuple[int, StreamEvent]]]) -> None:
    """A turn's events → the UI message stream's SSE frames: never an exception, and every
    frame is ``data: <JSON a browser reads>``."""
    reset_step, events = given
    stream = protocol.UIMessageStream("c1/turn-1/assistant", reset_step=reset_step)
    frames = [protocol.frame(stream.start())]
    with within():
        for turn, event in events:
            if stream.turn != turn:
                stream.begin_turn(turn)
            for chunk in stream.feed(event):
                frames.append(protocol.frame(chunk))
            if event.type == TOOL_WAIT and stream.step_is_waiting():
                frames.extend(protocol.frame(c) for c in stream.end_waiting())
        protocol.replayable([e for _, e in events])
    for data in frames:
        expect(data.startswith(b"data: ") and data.endswith(b"\n\n"), "not an SSE frame")
        _browser_json(data[6:-2])


# --- every target ------------------------------------------------------------------------

TARGETS: list[Target] = [
    Target(
        "intake",
        "workflows/intake.decode: a signal's or update's raw payload",
        raw_payloads(SUBMIT),
        check_intake,
        examples=100,
    ),
    Target(
        "conversation",
        "ConversationWorkflow: submitMessages, sendMessage/startTurn (validator and handler),"
        " continueLastTurn, cancelChat, submitToolResult; then state and continue-as-new",
        conversation_requests(),
        check_conversation,
        examples=60,
    ),
    Target(
        "turn-tool-result",
        "TurnWorkflow: toolResult signal (one or a list of ToolResolution)",
        turn_tool_results(),
        check_turn_tool_result,
    ),
    Target(
        "models",
        "contract.SubmitMessages, ContinueLastTurn, CancelChat, ToolResolution;"
        " messages.Message, Part, StreamPart (from JSON, and back)",
        model_inputs(),
        check_models,
        examples=100,
    ),
    Target(
        "providers",
        "models/anthropic.py and openai.py (Chat Completions, Responses) through the real SDK"
        " clients: SSE bytes and error bodies",
        provider_replies(),
        check_provider,
        examples=80,
    ),
    Target(
        "codec",
        "codec.EncryptionCodec.decode: intact, tampered, relabelled and junk payloads",
        codec_payloads(),
        check_codec,
    ),
    Target(
        "codec-keys",
        "codec.parse_keys: TURNS_ENCRYPTION_KEYS",
        KEY_SPECS,
        check_key_spec,
    ),
    Target(
        "web-request",
        "web/requests.parse_chat_request, then engine_message, reply_turn, resolution and"
        " what goes to the Temporal client",
        chat_requests(),
        check_chat_request,
        examples=80,
    ),
    Target(
        "web-messages",
        "web/protocol.ui_messages: stored messages → UIMessage[] (GET /messages)",
        STORED_MESSAGES,
        check_ui_messages,
    ),
    Target(
        "web-stream",
        "web/protocol.UIMessageStream: a turn's stream events → SSE frames",
        stream_events(),
        check_ui_stream,
    ),
]
BY_NAME = {t.name: t for t in TARGETS}


def sizes(value: Any) -> int:
    """An input's size in bytes, roughly (for the report)."""
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, Payload):
        return len(value.data)
    if isinstance(value, tuple | list):
        return sum(sizes(v) for v in value)
    if isinstance(value, BaseModel):
        return len(repr(value))
    if isinstance(value, str):
        return len(value)
    return 0
