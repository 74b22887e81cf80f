"""Consuming one model stream: accumulation, the stall watchdog and progress heartbeats.

The per-chunk path is kept to a few microseconds: a monotonic-clock read, a throttled
heartbeat, a pure ``accumulate`` and (only when a hook overrides it) ``on_chunk``. The stall
watchdog is one background task that wakes a few times per timeout, instead of a timer per
chunk; it also heartbeats while the stream is silent, so a live worker waiting for a slow
first token is not mistaken for a dead one (the stall timeout decides that).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import assert_never

from durable_turns.errors import StreamStalled
from durable_turns.messages import (
    FinishChunk,
    Part,
    RawChunk,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningPart,
    SourcePart,
    StreamPart,
    TextDelta,
    TextPart,
    ToolCallChunk,
    ToolCallPart,
    ToolInputDelta,
    ToolInputStart,
    ToolResultChunk,
)


@dataclass
class StepSnapshot:
    """What one model step has produced so far.

    Streamed text is kept as a list of pieces and joined only when ``parts`` is read, so a
    long step costs the same per chunk as a short one (``str +=`` would copy it each time).
    """

    _parts: list[Part] = field(default_factory=list)
    finish: FinishChunk | None = None
    sources: list[SourcePart] = field(default_factory=list)
    chunks: int = 0
    _tool_inputs: dict[str, list[str]] = field(default_factory=dict)
    _open: TextPart | ReasoningPart | None = None
    """The part whose text is still streaming; its pieces are in ``_pieces``."""
    _pieces: list[str] = field(default_factory=list)
    _reasoning_closed: bool = False

    @property
    def parts(self) -> list[Part]:
        self._seal()
        return self._parts

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    def _seal(self) -> None:
        if self._open is not None and len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        if self._open is not None and self._pieces:
            self._open.text = self._pieces[0]

    def _streaming(self, kind: type[TextPart] | type[ReasoningPart]) -> TextPart | ReasoningPart:
        """The open part of ``kind`` that deltas extend, opening a new one when needed."""
        current = self._open
        if not isinstance(current, kind) or (kind is ReasoningPart and self._reasoning_closed):
            self._close()
            current = TextPart(text="") if kind is TextPart else ReasoningPart()
            self._parts.append(current)
            self._open, self._pieces, self._reasoning_closed = current, [], False
        return current

    def _close(self) -> None:
        self._seal()
        self._open, self._pieces = None, []


def accumulate(snapshot: StepSnapshot, chunk: StreamPart) -> StepSnapshot:
    """Fold one stream part into the snapshot (in place, and returned)."""
    match chunk:
        case TextDelta(text=text):
            snapshot._streaming(TextPart)
            snapshot._pieces.append(text)
        case ReasoningDelta():
            part = snapshot._streaming(ReasoningPart)
            assert isinstance(part, ReasoningPart)
            snapshot._pieces.append(chunk.text)
            if chunk.signature:
                part.signature = (part.signature or "") + chunk.signature
            if chunk.redacted_data:
                part.redacted_data = chunk.redacted_data
            if chunk.provider_metadata:
                merged = dict(part.provider_metadata or {})
                for provider, values in chunk.provider_metadata.items():
                    merged[provider] = {**merged.get(provider, {}), **values}
                part.provider_metadata = merged
        case ReasoningEnd():
            snapshot._reasoning_closed = True  # the next reasoning delta opens a new part
        case ToolInputStart(tool_call_id=call_id):
            snapshot._tool_inputs[call_id] = []
        case ToolInputDelta(tool_call_id=call_id, delta=delta):
            snapshot._tool_inputs.setdefault(call_id, []).append(delta)
        case ToolCallChunk():
            snapshot._tool_inputs.pop(chunk.tool_call_id, None)
            snapshot._close()
            snapshot._parts.append(
                ToolCallPart(
                    tool_call_id=chunk.tool_call_id,
                    tool_name=chunk.tool_name,
                    input=chunk.input,
                    provider_metadata=chunk.provider_metadata,
                )
            )
        case SourcePart():
            snapshot.sources.append(chunk)
        case ToolResultChunk() | RawChunk():
            pass
        case FinishChunk():
            snapshot.finish = chunk
        case _:
            assert_never(chunk)
    snapshot.chunks += 1
    return snapshot


OnChunk = Callable[[StreamPart], Awaitable[None]]
Heartbeat = Callable[..., None]


async def consume(
    stream: AsyncIterator[StreamPart],
    *,
    stall_timeout_ms: int,
    heartbeat: Heartbeat,
    heartbeat_every_s: float,
    on_chunk: OnChunk | None = None,
    sink: Callable[[StreamPart], None] | None = None,
    snapshot: StepSnapshot | None = None,
) -> StepSnapshot:
    """Drive ``stream`` to its end into a snapshot; raise ``StreamStalled`` on silence.

    ``sink`` (synchronous, e.g. the chunk-stream publisher) and ``on_chunk`` (the hook) see
    every part but the final ``FinishChunk``.
    """
    snap = snapshot if snapshot is not None else StepSnapshot()
    stall_s = stall_timeout_ms / 1000 if stall_timeout_ms > 0 else None
    clock = time.monotonic
    last_chunk = last_beat = clock()
    main = asyncio.current_task()
    assert main is not None
    stalled = False

    async def watchdog() -> None:
        nonlocal stalled, last_beat
        tick = min(heartbeat_every_s, stall_s / 4) if stall_s else heartbeat_every_s
        while True:
            await asyncio.sleep(tick)
            now = clock()
            if stall_s is not None and now - last_chunk > stall_s:
                stalled = True
                main.cancel()
                return
            if now - last_beat >= heartbeat_every_s:
                heartbeat(snap.chunks)
                last_beat = now

    dog = asyncio.create_task(watchdog())
    try:
        async for chunk in stream:
            now = clock()
            last_chunk = now
            if now - last_beat >= heartbeat_every_s:
                heartbeat(snap.chunks)
                last_beat = now
            accumulate(snap, chunk)
            if isinstance(chunk, FinishChunk):
                continue
            if sink is not None:
                sink(chunk)
            if on_chunk is not None:
                await on_chunk(chunk)
    except asyncio.CancelledError:
        if stalled:
            main.uncancel()
            raise StreamStalled(stall_timeout_ms, snap.chunks) from None
        raise
    finally:
        dog.cancel()
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                pass
    return snap
