"""The transcript store as activities see it: an outage is waited out, not failed on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio import activity

from durable_turns.activities.errors import store_unavailable, taken_over
from durable_turns.activities.heartbeats import keep_alive
from durable_turns.messages import Message
from durable_turns.store import (
    StepRecord,
    StoreUnavailable,
    ToolResultRecord,
    TranscriptStore,
    TurnNotOwned,
    TurnRecord,
    TurnState,
)

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
                if not activity.in_activity():
                    return await op()
                # A call into a store whose link hangs (a dropped route, a full queue) is
                # slow, not failed: the activity heartbeats meanwhile, so its live worker is
                # not taken for a dead one at its heartbeat timeout.
                async with keep_alive(self.beat_every_s, at_once=False):
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

    async def messages(self, conversation_id: str, *, superseded: bool = False) -> list[Message]:
        return await self._call(lambda: self.inner.messages(conversation_id, superseded=superseded))

    async def supersede_messages(
        self,
        conversation_id: str,
        from_message_id: str | None,
        turn_id: str,
        *,
        owner: str | None = None,
    ) -> list[str]:
        return await self._call(
            lambda: self.inner.supersede_messages(
                conversation_id, from_message_id, turn_id, owner=owner
            )
        )

    async def save_turn(self, turn: TurnRecord) -> None:
        await self._call(lambda: self.inner.save_turn(turn))

    async def claim_turn(self, turn: TurnRecord) -> TurnRecord | None:
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

    async def turn_state(self, turn_id: str, *, transcript: bool = False) -> TurnState | None:
        return await self._call(lambda: self.inner.turn_state(turn_id, transcript=transcript))


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
