"""What every activity shares: the worker's store, providers, tools, hooks and settings.

The runtime builds one ``ActivityDeps`` per worker and hands it to each activity module;
the helpers here are the few things more than one activity needs (loading the turn,
resolving a model, the tools a step is offered, the live chunk stream, heartbeats).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_turns.activities.errors import INVALID_MODEL, store_unavailable, taken_over
from durable_turns.activities.lifecycle import Lifecycle
from durable_turns.config import Settings
from durable_turns.contract import TurnRef
from durable_turns.hooks import TurnHooks
from durable_turns.hooks.session import Session
from durable_turns.hooks.types import ToolSpec, TurnConfig
from durable_turns.messages import Message
from durable_turns.models import ModelProvider, ModelRegistry, ProviderError
from durable_turns.store import (
    StepRecord,
    StoreUnavailable,
    ToolResultRecord,
    TranscriptStore,
    TurnNotOwned,
    TurnRecord,
)
from durable_turns.store.base import owns
from durable_turns.streams import ChunkPublisher, ChunkStreamBackend
from durable_turns.tools import ToolRegistry


def worker_options(settings: Settings) -> dict[str, Any]:
    """The Worker options activities rely on.

    On SIGTERM, running activities get ``shutdown_grace_s`` to finish before they are handed
    over (cancelled, then re-run in full elsewhere). A cancel reaches an activity only in the
    answer to a heartbeat, and the SDK sends at most one heartbeat per 0.8 × the heartbeat
    timeout (24 s at the default 30 s): ``cancel_check_ms`` caps that interval, so a model
    step, which heartbeats twice as often while it streams, stops within about that long.
    Activities that heartbeat rarely (hooks, tools: every timeout/4) send no more than before.
    """
    options: dict[str, Any] = {
        "graceful_shutdown_timeout": timedelta(seconds=settings.shutdown_grace_s)
    }
    if settings.cancel_check_ms > 0:
        options["max_heartbeat_throttle_interval"] = timedelta(
            milliseconds=settings.cancel_check_ms
        )
    return options


def cancelled_by_user() -> bool:
    """Whether the running activity's cancellation was asked for by its workflow (cancelChat),
    rather than caused by a worker shutdown, a heartbeat timeout or a lost server."""
    details = activity.cancellation_details()
    return bool(
        details is not None
        and details.cancel_requested
        and not (details.worker_shutdown or details.timed_out or details.not_found)
        and not (details.paused or details.reset)
    )


@contextlib.asynccontextmanager
async def keep_alive(every_s: float) -> AsyncIterator[None]:
    """Heartbeat on a timer while a hook or tool runs: the worker is alive, not stuck.

    A local activity (begin/finish/fail turn) has no heartbeat of its own: the SDK keeps its
    workflow task alive instead, so there is nothing to do."""
    if activity.info().is_local:
        yield
        return

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(every_s)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()


T = TypeVar("T")

STORE_WAIT_MAX_S = 5.0
"""The longest pause between two tries of a store call while the store is unavailable."""


class PatientStore(TranscriptStore):
    """The worker's store as activities see it: a store outage is waited out in-process.

    A call that fails with StoreUnavailable (connection refused or lost, database locked) is
    tried again with backoff (0.2 s doubling to 5 s), heartbeating meanwhile with the details
    "waiting for the store: …" and a log line, for as long as the activity attempt may run:
    a model whose reply is streamed is never asked again because the store was down, nor is
    a tool re-run, nor does an outage spend a model step's retry budget. Only when the
    attempt's start-to-close timeout is near does it fail, with a retryable StoreUnavailable
    (bookkeeping activities retry that without limit). Every store write is idempotent by
    key, so trying one again is safe. A write into a turn that another workflow run owns
    becomes the non-retryable TurnTakenOver.
    """

    def __init__(self, inner: TranscriptStore, beat_every_s: float) -> None:
        self.inner = inner
        self.beat_every_s = beat_every_s

    def __getattr__(self, name: str) -> Any:  # what a backend has beyond the interface
        return getattr(self.inner, name)

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        try:
            try:
                return await op()
            except StoreUnavailable as e:
                if not activity.in_activity():
                    raise
                return await self._wait_out(op, e)
        except TurnNotOwned as e:
            raise taken_over(e.turn_id) from e

    async def _wait_out(self, op: Callable[[], Awaitable[T]], error: StoreUnavailable) -> T:
        started = time.monotonic()
        deadline = started + _attempt_time_left()
        log = activity.logger
        log.warning("waiting for the store: %s", error)
        delay, logged = 0.2, started
        while True:
            if time.monotonic() + delay > deadline:
                raise store_unavailable(error, time.monotonic() - started) from error
            await self._pause(delay, f"waiting for the store: {error}")
            try:
                async with keep_alive(self.beat_every_s):
                    result = await op()
            except StoreUnavailable as e:
                error = e
                delay = min(delay * 2, STORE_WAIT_MAX_S)
                if time.monotonic() - logged > 30:
                    log.warning(
                        "still waiting for the store (%.0fs): %s", time.monotonic() - started, e
                    )
                    logged = time.monotonic()
                continue
            log.info("the store is back after %.1fs", time.monotonic() - started)
            return result

    async def _pause(self, seconds: float, details: str) -> None:
        """Sleep, heartbeating (with ``details``) often enough for the heartbeat timeout."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            activity.heartbeat(details)
            await asyncio.sleep(min(left, self.beat_every_s))

    # the interface, each call through _call
    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def add_messages(
        self,
        conversation_id: str,
        messages: list[Message],
        turn_id: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        await self._call(
            lambda: self.inner.add_messages(conversation_id, messages, turn_id, owner=owner)
        )

    async def put_message(
        self,
        conversation_id: str,
        message: Message,
        turn_id: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        await self._call(
            lambda: self.inner.put_message(conversation_id, message, turn_id, owner=owner)
        )

    async def messages(self, conversation_id: str) -> list[Message]:
        return await self._call(lambda: self.inner.messages(conversation_id))

    async def save_turn(self, turn: TurnRecord) -> None:
        await self._call(lambda: self.inner.save_turn(turn))

    async def claim_turn(self, turn: TurnRecord) -> bool:
        return await self._call(lambda: self.inner.claim_turn(turn))

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        return await self._call(lambda: self.inner.get_turn(turn_id))

    async def last_turn_number(self, conversation_id: str) -> int:
        return await self._call(lambda: self.inner.last_turn_number(conversation_id))

    async def save_step(
        self, turn_id: str, step: StepRecord, *, owner: str | None = None
    ) -> StepRecord:
        return await self._call(lambda: self.inner.save_step(turn_id, step, owner=owner))

    async def steps(self, turn_id: str, run: int) -> list[StepRecord]:
        return await self._call(lambda: self.inner.steps(turn_id, run))

    async def save_tool_result(
        self, turn_id: str, result: ToolResultRecord, *, owner: str | None = None
    ) -> ToolResultRecord:
        return await self._call(lambda: self.inner.save_tool_result(turn_id, result, owner=owner))

    async def tool_results(self, turn_id: str) -> dict[str, ToolResultRecord]:
        return await self._call(lambda: self.inner.tool_results(turn_id))


def _attempt_time_left() -> float:
    """Seconds this activity attempt may still wait before its start-to-close timeout, less
    a margin to fail in (infinite without a timeout)."""
    info = activity.info()
    timeout = info.start_to_close_timeout
    if not timeout:
        return float("inf")
    end = info.started_time + timeout
    margin = min(max(timeout.total_seconds() * 0.05, 2.0), 10.0)
    return (end - datetime.now(UTC)).total_seconds() - margin


@dataclass
class ActivityDeps:
    """``session``: what ``configure_session`` returned (awaited on first use if it is a
    coroutine); ``streams``: the live chunk stream (None: off); ``extensions``: default
    ``hooks.extensions``."""

    store: TranscriptStore
    models: ModelRegistry
    tools: ToolRegistry
    hooks: TurnHooks
    settings: Settings
    session_source: Session | Awaitable[Session] | None = None
    streams: ChunkStreamBackend | None = None
    extensions: Sequence[Any] | None = None
    lifecycle: Lifecycle = field(init=False)
    _session_lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)
    _build_lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)
    _built: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        if not isinstance(self.store, PatientStore):
            self.store = PatientStore(self.store, self.beat_every)
        self.lifecycle = Lifecycle(self.hooks, self.extensions)
        if self.session_source is None:
            self.session_source = Session()

    @property
    def beat_every(self) -> float:
        """How often a hook or tool that runs long heartbeats."""
        return max(self.settings.heartbeat_timeout_s / 4, 0.05)

    @property
    def stream_beat_every(self) -> float:
        """How often a streaming model step heartbeats: twice per ``cancel_check_ms``, so the
        SDK always has one to send when its throttle lets the next through."""
        if self.settings.cancel_check_ms <= 0:
            return self.beat_every
        return min(self.beat_every, max(self.settings.cancel_check_ms / 2000, 0.05))

    async def session(self) -> Session:
        if not isinstance(self.session_source, Session):
            async with self._session_lock:
                if not isinstance(self.session_source, Session):
                    self.session_source = await self.session_source  # type: ignore[misc]
        assert isinstance(self.session_source, Session)
        return self.session_source

    async def turn(self, ref: TurnRef) -> TurnRecord:
        """The turn's record, if this run (``ref.owner``) owns the turn, else TurnTakenOver."""
        turn = await self.store.get_turn(ref.turn_id)
        if turn is None:
            raise ApplicationError(f"turn {ref.turn_id} was never begun", non_retryable=True)
        if not owns(turn.owner, ref.owner):
            raise taken_over(ref.turn_id)
        if ref.owner:
            turn.owner = ref.owner  # a record from before owners is adopted by its run
        return turn

    async def system(self, config: TurnConfig) -> str:
        if config.system is not None:
            return config.system
        return await (await self.session()).system_prompt(self.hooks.system_prompt)

    def tool_specs(
        self, config: TurnConfig, step_active: list[str] | None = None, model: str | None = None
    ) -> list[ToolSpec]:
        """Default tools + ``config.tools``, narrowed by the turn's and the step's active tools;
        a tool meant for some models only (``@tool(models=...)``) is offered to those only."""
        names = self.tools.defaults(model)
        extra: dict[str, ToolSpec] = {}
        for item in config.tools or []:
            if isinstance(item, ToolSpec):
                extra[item.name] = item
            elif item not in names:
                names.append(item)
        specs = {
            n: t.spec for n in names if (t := self.tools.get(n)) is not None and t.offered_to(model)
        }
        specs.update(extra)
        for active in (config.active_tools, step_active):
            if active is not None:
                specs = {n: s for n, s in specs.items() if n in active}
        return list(specs.values())

    def resolve(self, model: str) -> tuple[ModelProvider, str]:
        """A ``provider:model`` id → its provider and model name, or a typed InvalidModel."""
        try:
            return self.models.resolve(model)
        except ProviderError as e:
            raise ApplicationError(str(e), type=INVALID_MODEL, non_retryable=True) from e

    async def resolve_async(self, model: str) -> tuple[ModelProvider, str]:
        """``resolve``, with a provider's first use (its SDK import and client, 1.5–2 s for
        anthropic or openai) built in a thread: the event loop, and so every heartbeat and
        stream of the worker, goes on meanwhile."""
        prefix = model.partition(":")[0]
        if prefix in self._built:
            return self.resolve(model)
        async with self._build_lock:
            result = await asyncio.to_thread(self.resolve, model)
            self._built.add(prefix)
            return result

    def stall_ms(self, config: TurnConfig) -> int:
        """``chat_stream_stall_timeout_ms``, else ``timeout.chunk_ms``, else the worker's."""
        if config.chat_stream_stall_timeout_ms is not None:
            return config.chat_stream_stall_timeout_ms
        if config.timeout and config.timeout.chunk_ms:
            return config.timeout.chunk_ms
        return self.settings.stall_timeout_ms

    @contextlib.asynccontextmanager
    async def publisher(
        self, turn_id: str, step: int | None
    ) -> AsyncIterator[ChunkPublisher | None]:
        """The turn's live chunk stream (None when streaming is off); always flushed."""
        if self.streams is None:
            yield None
            return
        attempt = activity.info().attempt
        async with ChunkPublisher(self.streams, turn_id, step=step, attempt=attempt) as publisher:
            yield publisher
