"""Units of the hook machinery: sync/async hooks, the chunk path, transforms, output checks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

from durable_turns.activities.deps import ActivityDeps
from durable_turns.activities.lifecycle import Lifecycle
from durable_turns.activities.structured_output import check_output
from durable_turns.config import Settings
from durable_turns.hooks import (
    ChatErrorContext,
    ChunkContext,
    PrepareStepContext,
    Session,
    StepConfig,
    TurnConfig,
    TurnContext,
    TurnHooks,
)
from durable_turns.messages import (
    FinishChunk,
    ReasoningDelta,
    ReasoningEnd,
    StreamPart,
    TextDelta,
)
from durable_turns.tools import ToolRegistry
from durable_turns.transforms import (
    UnknownTransform,
    apply_transforms,
    load_transforms,
    resolve_transforms,
    transform_names,
)


def turn_context() -> TurnContext:
    return TurnContext(
        system="s",
        messages=[],
        tools=[],
        model="demo:echo",
        continuation=False,
        body={},
        request_id="r",
        conversation_id="c",
        turn_number=1,
    )


class SyncHooks(TurnHooks):
    def before_turn(self, ctx: TurnContext) -> Any:  # type: ignore[override]
        return {"temperature": 0.5}

    def before_step(self, ctx: PrepareStepContext) -> Any:  # type: ignore[override]
        return StepConfig(model="demo:x")

    def on_chat_error(self, error: Exception, ctx: ChatErrorContext) -> Exception:
        return ValueError(f"friendly {ctx.stage}")

    def classify_chat_error(self, error: Exception | str, ctx: ChatErrorContext) -> Any:
        return "rate_limit"


class AsyncHooks(TurnHooks):
    async def on_chat_error(self, error: Exception, ctx: ChatErrorContext) -> Exception:  # type: ignore[override]
        return ValueError("async friendly")

    async def classify_chat_error(self, error: Exception | str, ctx: ChatErrorContext) -> Any:  # type: ignore[override]
        return "context_overflow"

    async def before_turn(self, ctx: TurnContext) -> TurnConfig | None:
        raise KeyError("nope")


async def test_sync_and_async_hooks_are_both_accepted() -> None:
    ctx = ChatErrorContext(stage="stream")
    sync, async_ = Lifecycle(SyncHooks()), Lifecycle(AsyncHooks())
    assert (await sync.before_turn(turn_context())).temperature == 0.5
    prepare = PrepareStepContext(steps=[], step_number=0, model="m", messages=[])
    assert (await sync.before_step(prepare)).model == "demo:x"
    assert await sync.on_chat_error(RuntimeError("x"), ctx) == "friendly stream"
    assert await async_.on_chat_error(RuntimeError("x"), ctx) == "async friendly"
    assert await sync.classify("x", ctx) == "rate_limit"
    assert await async_.classify("x", ctx) == "context_overflow"
    assert await Lifecycle(TurnHooks()).on_chat_error(RuntimeError("raw"), ctx) == "raw"
    with pytest.raises(ApplicationError) as info:
        await async_.before_turn(turn_context())
    assert info.value.type == "HookError" and "before_turn raised KeyError" in info.value.message


class ChunkHooks(TurnHooks):
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_chunk(self, ctx: ChunkContext) -> None:
        self.seen.append(ctx.chunk.type)


async def test_on_chunk_costs_nothing_unless_overridden() -> None:
    assert Lifecycle(TurnHooks()).chunk_handler(0, "r") is None
    hooks = ChunkHooks()
    handler = Lifecycle(hooks).chunk_handler(0, "r")
    assert handler is not None
    parts: list[StreamPart] = [
        ReasoningDelta(text="r"),
        ReasoningEnd(),
        TextDelta(text="t"),
        FinishChunk(),
    ]
    for part in parts:
        await handler(part)
    assert hooks.seen == ["reasoning-delta", "text-delta"]
    hidden = Lifecycle(hooks).chunk_handler(0, "r", send_reasoning=False)
    assert hidden is not None
    for part in parts:
        await hidden(part)
    assert hooks.seen[2:] == ["text-delta"]


async def _source(parts: list[StreamPart], closed: list[bool]) -> AsyncIterator[StreamPart]:
    try:
        for part in parts:
            yield part
    finally:
        closed.append(True)


async def test_transforms_apply_in_order_and_may_split_or_drop() -> None:
    def drop_x(part: StreamPart) -> StreamPart | None:
        return None if isinstance(part, TextDelta) and part.text == "x" else part

    def split(part: StreamPart) -> list[StreamPart]:
        return [part, part] if isinstance(part, TextDelta) else [part]

    closed: list[bool] = []
    parts: list[StreamPart] = [TextDelta(text="a"), TextDelta(text="x"), FinishChunk()]
    out = [
        p
        async for p in apply_transforms(
            _source(parts, closed), [drop_x, split, *resolve_transforms(["uppercase"])]
        )
    ]
    assert [p.type for p in out] == ["text-delta", "text-delta", "finish"]
    assert [p.text for p in out if isinstance(p, TextDelta)] == ["A", "A"]
    assert closed == [True]


async def test_transforms_close_the_provider_stream_when_abandoned() -> None:
    closed: list[bool] = []
    stream = apply_transforms(_source([TextDelta(text="a")] * 5, closed), [])
    await stream.__anext__()
    await stream.aclose()  # what consume() does when a step stalls or is cancelled
    assert closed == [True]


def test_transform_registry() -> None:
    assert {"uppercase", "redact-emails"} <= set(transform_names())
    with pytest.raises(UnknownTransform, match=r"unknown stream transform\(s\) \['nope'\]"):
        resolve_transforms(["uppercase", "nope"])
    [redact] = resolve_transforms(["redact-emails"])
    assert redact(TextDelta(text="mail a.b+c@x.co.uk now")) == TextDelta(text="mail [email] now")
    with pytest.raises(ValueError, match="registers no stream transforms"):
        load_transforms("json")


class Item(BaseModel):
    name: str
    tags: list[str] = []


class Order(BaseModel):
    id: int
    status: str
    items: list[Item]
    note: str | None = None


ORDER = TurnConfig(output=Order).output or {}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"id": 1, "status": "ok", "items": [{"name": "a", "tags": ["x"]}]}', None),
        ('```json\n{"id": 1, "status": "ok", "items": [], "note": null}\n```', None),
        ('{"id": "1", "status": "ok", "items": []}', "$.id: expected integer"),
        ('{"id": 1, "items": []}', "missing required field 'status'"),
        (
            '{"id": 1, "status": "ok", "items": [{"tags": []}]}',
            "$.items[0]: missing required field 'name'",
        ),
        ('{"id": 1, "status": "ok", "items": [], "note": 5}', "$.note: matches none"),
        ("[1, 2]", "$: expected object"),
        ("Sure! Here it is.", "not JSON"),
    ],
)
def test_output_check_on_a_pydantic_schema(text: str, problem: str | None) -> None:
    found = check_output(text, ORDER)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found, found


def test_output_check_keywords() -> None:
    schema = {
        "type": "object",
        "properties": {
            "level": {"enum": ["low", "high"]},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$", "maxLength": 3},
        },
        "additionalProperties": False,
    }
    assert check_output('{"level": "low", "score": 0.5, "code": "ABC"}', schema) is None
    problems = check_output('{"level": "mid", "score": 2, "code": "abcd", "x": 1}', schema) or ""
    for expected in (
        "is not one of",
        "2 > 1",
        "does not match",
        "longer than 3",
        "unexpected field 'x'",
    ):
        assert expected in problems


class AsyncSessionHooks(TurnHooks):
    configured = 0

    async def configure_session(self, session: Session) -> Session:  # type: ignore[override]
        AsyncSessionHooks.configured += 1
        return session.with_context("soul", "async block")


async def test_an_async_configure_session_is_awaited_once() -> None:
    hooks = AsyncSessionHooks()
    acts = ActivityDeps(
        None,
        None,
        ToolRegistry(),
        hooks,
        Settings(),
        hooks.configure_session(Session()),  # type: ignore[arg-type]
    )
    first, second = await asyncio.gather(acts.session(), acts.session())
    assert first is second and AsyncSessionHooks.configured == 1
    assert await first.system_prompt("unused") == "## soul\nasync block"
