"""The out-of-band chunk stream of a turn: event model, backend interface, batching publisher.

A chat backend shows a turn's reply token by token, but the chunks must stay out of Temporal
history: thousands of tiny events per turn would bloat it and slow every replay. The
model-step activity publishes them to a per-turn stream instead, and readers read it from
any offset, as many times and as late as they like.

Offsets are assigned by the backend, never by a publisher, so they are gap-free and strictly
increasing per stream even when a retried activity on another worker (another process)
appends after the previous attempt's chunks. A retried attempt first writes a ``reset``
marker; ``live_events`` applies it for readers. Appends are idempotent per ``(writer,
seq)``, so a retried append whose first try was applied is written once, and a publisher's
boundaries wait for the backend at most ``write_timeout_s`` (``StreamUnavailable``).

A turn's stream belongs to the workflow run that owns the turn (``TurnRef.owner``), by the
same rule as the turn's record in the transcript store (``store.base.claim_decision``):
every append names its run, and the backend checks it in the same atomic step that assigns
the offsets (``claim_stream``). The first append claims the stream; the turn's own
conversation's run takes over a stream some other run claimed, and from then on readers
see nothing from before the take-over (``StreamClaim.since``) and that run's appends are
refused (``StreamNotOwned``); a run started elsewhere never takes a conversation's stream.
A reader of a conversation's turn (``by_conversation=True``: the front door, the Python
client) sees nothing at all until the conversation's run claimed the stream.

Why it is long (about 870 lines): four marked sections (the event model, who owns a stream,
the backend interface with its in-memory backend, the publisher) that every backend and
every reader uses together, and the backend's small side records (cancel marks, worker
liveness) beside its chunks; each backend lives in a module of its own.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Final, Self

from pydantic import BaseModel, ConfigDict, Field

from durable_turns.errors import StreamNotOwned, StreamUnavailable

log = logging.getLogger(__name__)

# --- the event model ---------------------------------------------------------------------

CHUNK: Final = "chunk"
"""One ``StreamPart`` of a model step (``data`` is its ``model_dump(mode="json")``)."""
RESET: Final = "reset"
"""A retried attempt starts: drop what earlier attempts of the step streamed."""
RECOVERING: Final = "recovering"
"""The turn resumes after a lost attempt (a worker died or shut down, the store was out of
reach, the model stream stalled): ``data`` has ``stage`` (``"stream"``, ``"tool"`` or
``"turn"``), ``reason`` (``contract.RecoveryReason``), ``message``, ``attempt``, ``deaths``
and, for a tool, ``tool_call_id`` and ``tool_name``. The new attempt follows (a model
step's after its ``reset``); readers may show "recovering…" until it streams."""
STEP_START: Final = "step-start"
STEP_FINISH: Final = "step-finish"
TOOL_RESULT: Final = "tool-result"
"""A call's recorded result (``data``: the ``ToolResultPart``'s fields, ``approval`` for a
call that needed one, and ``outcome``: ``"ran"``, ``"blocked"``, ``"substituted"``,
``"denied"``... as ``contract.ToolCallOutcome``)."""
TOOL_WAIT: Final = "tool-wait"
"""The turn waits for the client on a call (``data``: ``tool_call_id``, ``tool_name``,
``waiting_for`` = ``"client"`` or ``"approval"``, ``input``); its ``tool-result`` follows
once the client answered."""
TURN_FINISH: Final = "turn-finish"
"""The last event of a turn (``data["status"]``); ``follow()`` ends after it."""
AGENT_CHUNK: Final = "agent-chunk"
"""One event of a sub-agent's stream, copied onto its parent's while an agent tool's call
runs (``data``: ``tool_call_id``, ``tool_name``, the child's ``conversation_id``, the child
event's ``offset`` and the ``event`` itself, its ``type``, ``data``, ``step``, ``attempt``).
The child's ``reset`` events come along inside; a reader drops an ``agent-chunk`` whose
``offset`` is not past the last it saw for the call (a relay retried after its worker died
may copy a few again)."""


class StreamEvent(BaseModel):
    """One event of a turn's stream, as readers see it."""

    model_config = ConfigDict(frozen=True)

    offset: int
    """Position in the stream: 0, 1, 2… with no gaps; resume with ``after=offset``."""
    type: str
    data: dict[str, Any] = Field(default_factory=dict)
    step: int | None = None
    """The model step that published the event, when the publisher knew it."""
    attempt: int | None = None
    """The activity attempt that published the event (1 for the first)."""


def encode_event(
    event_type: str, data: Any = None, step: int | None = None, attempt: int | None = None
) -> dict[str, Any]:
    """The wire form of one event (what ``append`` takes): pydantic models are dumped."""
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    event: dict[str, Any] = {"type": event_type, "data": {} if data is None else data}
    if step is not None:
        event["step"] = step
    if attempt is not None:
        event["attempt"] = attempt
    return event


_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""``json.dumps(..., separators=...)`` builds an encoder per call; a batch per token reuses one."""


def encode_batch(events: Sequence[Mapping[str, Any]]) -> str:
    """One batch's stored body: a compact JSON list of wire events."""
    return _COMPACT.encode(list(events))


def decode_batch(first_offset: int, body: str | bytes, after: int = -1) -> list[StreamEvent]:
    """The events of a stored batch whose offset is greater than ``after``."""
    return decode_events(first_offset, json.loads(body), after)


def decode_events(
    first_offset: int, items: Sequence[Mapping[str, Any]], after: int = -1
) -> list[StreamEvent]:
    """Wire events numbered from ``first_offset``, keeping those past ``after``."""
    out = []
    for i in range(max(after - first_offset + 1, 0), len(items)):
        e, offset = items[i], first_offset + i
        out.append(
            StreamEvent(
                offset=offset,
                type=e["type"],
                data=e.get("data") or {},
                step=e.get("step"),
                attempt=e.get("attempt"),
            )
        )
    return out


def live_events(events: Iterable[StreamEvent]) -> list[StreamEvent]:
    """The events a UI should render: what retries invalidated is dropped.

    A ``reset`` of step *s* by attempt *a* drops every earlier event of *s* from an older
    attempt, and later ones too (a worker that lost its activity may still be streaming).
    A reset without a step drops everything since the last ``step-finish``. Reset markers
    themselves are not returned.
    """
    out: list[StreamEvent] = []
    current: dict[int, int] = {}
    for ev in events:
        if ev.type == RESET:
            if ev.step is None:
                i = len(out)
                while i and out[i - 1].type != STEP_FINISH:
                    i -= 1
                del out[i:]
            else:
                a = ev.attempt or 0
                current[ev.step] = max(current.get(ev.step, 0), a)
                out = [
                    e
                    for e in out
                    if not (e.type in ATTEMPTED and e.step == ev.step and (e.attempt or 0) < a)
                ]
            continue
        if (
            ev.type in ATTEMPTED
            and ev.step is not None
            and (ev.attempt or 0) < current.get(ev.step, 0)
        ):
            continue
        out.append(ev)
    return out


ATTEMPTED: Final = frozenset({CHUNK, STEP_START, STEP_FINISH})
"""What a model step's attempt publishes (and a reset discards). A step's tool calls run as
activities of their own, whose attempts are not the step's: their ``tool-wait`` and
``tool-result`` events carry the step's number but always count."""


# --- who owns a stream --------------------------------------------------------------------


class StreamClaim(BaseModel):
    """The run a stream belongs to, and where its events begin."""

    model_config = ConfigDict(frozen=True)

    owner: str
    by_conversation: bool = False
    since: int = 0
    """The first offset of this owner's events: readers never see what comes before it
    (another run's events, from before the take-over)."""


def claim_stream(
    stream_id: str,
    current: StreamClaim | None,
    owner: str | None,
    by_conversation: bool,
    next_offset: int,
) -> StreamClaim | None:
    """The claim after an append by ``owner`` to a stream whose claim is ``current`` and
    whose next offset is ``next_offset``; raises StreamNotOwned when the append is refused.

    The transcript store's rule (``store.base.claim_decision``): the same run appends; a
    first append claims the stream (what an unclaimed stream held, from a worker older than
    claims, stays visible, as the store adopts records from before owners); the turn's
    conversation's run takes over from any other run, a run started elsewhere only from
    another such run, never from the conversation's. No ``owner``: a caller from before
    owners, not checked (the claim is kept). The Redis backend runs the same rule in Lua.
    """
    if not owner:
        return current
    if current is None:
        return StreamClaim(owner=owner, by_conversation=by_conversation, since=0)
    if current.owner == owner:
        return current
    if by_conversation or not current.by_conversation:
        return StreamClaim(owner=owner, by_conversation=by_conversation, since=next_offset)
    raise StreamNotOwned(stream_id, current.owner)


def visible_after(claim: StreamClaim | None, after: int, by_conversation: bool) -> int | None:
    """The offset a read must start after, given the stream's claim: never before the
    owner's first event; None when the reader must see nothing (``by_conversation``: the
    stream is not, or not yet, its conversation's run's)."""
    if claim is None:
        return after
    if by_conversation and not claim.by_conversation:
        return None
    return max(after, claim.since - 1)


# --- the backend interface ---------------------------------------------------------------


MARK_TTL_S: Final = 900.0
"""How long a cancel mark is kept: it only has to outlive the wait between a cancelChat and
the running step's next look (a fraction of a second), and a request id never runs twice."""

WAKE_FALLBACK_POLL_S = 1.0
"""With wake-ups, how often a follower rereads anyway (a lost wake-up costs at most this)."""


class ChunkStreamBackend(abc.ABC):
    """Append-only, per-turn streams of events with backend-assigned offsets.

    Implementations: SQLite (one file shared by processes, readers poll), Redis Streams
    (blocking reads, TTL) and an in-process one for unit tests.

    Ownership (the module's docstring): ``append`` takes the appending run's ``owner`` and
    checks it atomically with the append; ``read`` and ``follow`` never return events from
    before the current owner's claim, and with ``by_conversation`` nothing of a stream
    that its conversation's run has not claimed.
    """

    async def open(self) -> None:
        """Connect (and create the schema); nothing to do by default."""
        return None

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @abc.abstractmethod
    async def append(
        self,
        stream_id: str,
        events: Sequence[Mapping[str, Any]],
        *,
        owner: str | None = None,
        by_conversation: bool = False,
        writer: str | None = None,
        seq: int = 0,
    ) -> int:
        """Append wire events (see ``encode_event``) atomically; return the last offset.

        The offsets are the next ones of the stream, whatever process appends concurrently.
        With ``owner`` (the appending run), the stream's claim is checked and updated in the
        same atomic step (``claim_stream``): StreamNotOwned when another run owns it, and
        nothing is appended then. An empty list appends nothing and returns the current last
        offset.

        ``writer`` and ``seq`` make the append idempotent: a batch whose ``seq`` is not
        greater than the last one ``writer`` appended to this stream appends nothing and
        returns the last offset that writer's appends got. An append whose answer was lost
        (a timeout, a reset connection) may still have been applied, late; retried with the
        same ``writer`` and ``seq`` it is written once.
        """

    @abc.abstractmethod
    async def read(
        self,
        stream_id: str,
        after: int = -1,
        limit: int | None = None,
        *,
        by_conversation: bool = False,
    ) -> list[StreamEvent]:
        """The events with offset > ``after`` (all of them from -1), in order, at most
        ``limit``: the current owner's (``visible_after``)."""

    @abc.abstractmethod
    async def claim(self, stream_id: str) -> StreamClaim | None:
        """The stream's claim (None: unclaimed, or written only by callers before owners)."""

    @abc.abstractmethod
    async def last_offset(self, stream_id: str) -> int:
        """The stream's last offset, -1 when it is empty or unknown."""

    @abc.abstractmethod
    async def delete(self, stream_id: str) -> None: ...

    async def expire(self, stream_id: str, ttl_s: float) -> None:
        """Let the stream vanish ``ttl_s`` from now, where the backend can (Redis)."""
        return None

    async def trim(self, older_than_s: float) -> int:
        """Delete what was written longer ago than ``older_than_s``; return how many batches."""
        return 0

    keeps_marks: ClassVar[bool] = False
    """Whether ``mark_cancel`` keeps marks (a backend of another package may not)."""

    async def mark_cancel(self, key: str) -> bool:
        """Leave a cancel mark under ``key`` (``streams.cancel.mark_key``) for
        :data:`MARK_TTL_S`: the model step of that request stops at its next look
        (``streams.cancel.CancelWatch``). False: this backend keeps no marks."""
        return False

    async def cancel_marks(self, keys: Collection[str]) -> set[str]:
        """Which of ``keys`` carry a cancel mark younger than :data:`MARK_TTL_S`: one round
        trip for all of them (a worker looks for all its steps at once)."""
        return set()

    keeps_liveness: ClassVar[bool] = False
    """Whether the backend keeps worker liveness records (``streams.liveness``)."""

    async def beat(self, worker: str) -> None:
        """Count one beat of ``worker`` (a worker process is alive)."""
        return None

    async def beats(self) -> dict[str, int]:
        """Every worker's beat count: one round trip (a count that stops moving is a death)."""
        return {}

    async def attempt_started(self, worker: str, key: str, body: str) -> None:
        """Record that ``worker`` runs the attempt ``key`` (``body``: what recovers it)."""
        return None

    async def attempt_ended(self, worker: str, key: str) -> None:
        """Forget the attempt ``key`` of ``worker`` (it ended, however)."""
        return None

    async def attempts_of(self, worker: str) -> dict[str, str]:
        """The attempts ``worker`` recorded and has not ended: ``{key: body}``."""
        return {}

    async def take_attempt(self, worker: str, key: str) -> bool:
        """Remove an attempt's record; True for the one caller that removed it (of many
        workers that saw its worker die at once, one recovers it)."""
        return False

    async def forget_worker(self, worker: str) -> None:
        """Drop a worker's beats and attempts (it stopped, or died long ago)."""
        return None

    def wakeups(
        self, stream_id: str
    ) -> contextlib.AbstractAsyncContextManager[asyncio.Event | None]:
        """An event set when ``stream_id`` may have grown (None: this backend can't tell,
        so ``follow`` polls). The SQLite backend wakes readers across processes."""
        return contextlib.nullcontext(None)

    async def follow(
        self,
        stream_id: str,
        after: int = -1,
        *,
        poll_interval: float = 0.05,
        until_finished: bool = True,
        idle_timeout: float | None = None,
        by_conversation: bool = False,
    ) -> AsyncIterator[StreamEvent]:
        """Yield the events after ``after`` as they arrive, ending after ``turn-finish``;
        the current owner's only, as ``read`` (another run's ``turn-finish`` ends nothing).

        This default rereads on every wake-up the backend gives (``wakeups``), and every
        ``poll_interval`` only when it gives none (Redis blocks on the server instead).
        ``idle_timeout`` ends the iteration quietly when nothing new arrives for that long
        (a turn whose worker died before its ``turn-finish``); the caller sees no
        ``turn-finish`` then.
        """
        cursor = after
        idle_since = time.monotonic()
        async with self.wakeups(stream_id) as woken:
            pause = poll_interval if woken is None else WAKE_FALLBACK_POLL_S
            while True:
                if woken is not None:
                    woken.clear()  # before the read: a wake-up during it is kept
                events = await self.read(
                    stream_id, cursor, limit=1024, by_conversation=by_conversation
                )
                for ev in events:
                    cursor = ev.offset
                    yield ev
                    if until_finished and ev.type == TURN_FINISH:
                        return
                now = time.monotonic()
                if events:
                    idle_since = now
                    continue
                wait = pause
                if idle_timeout is not None:
                    left = idle_timeout - (now - idle_since)
                    if left <= 0:
                        return
                    wait = min(wait, left)
                if woken is None:
                    await asyncio.sleep(wait)
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), wait)


class MemoryBackend(ChunkStreamBackend):
    """In-process streams, shared by every instance with the same name: for unit tests only."""

    _registry: ClassVar[dict[str, dict[str, list[StreamEvent]]]] = {}
    _claim_registry: ClassVar[dict[str, dict[str, StreamClaim]]] = {}
    _writer_registry: ClassVar[dict[str, dict[tuple[str, str], tuple[int, int]]]] = {}
    _mark_registry: ClassVar[dict[str, dict[str, float]]] = {}
    _live_registry: ClassVar[dict[str, tuple[dict[str, int], dict[str, dict[str, str]]]]] = {}
    keeps_marks = True
    keeps_liveness = True

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._streams = self._registry.setdefault(name, {})
        self._claims = self._claim_registry.setdefault(name, {})
        self._writers = self._writer_registry.setdefault(name, {})
        self._marks = self._mark_registry.setdefault(name, {})
        self._beats, self._attempts = self._live_registry.setdefault(name, ({}, {}))

    async def beat(self, worker: str) -> None:
        self._beats[worker] = self._beats.get(worker, 0) + 1

    async def beats(self) -> dict[str, int]:
        return dict(self._beats)

    async def attempt_started(self, worker: str, key: str, body: str) -> None:
        self._attempts.setdefault(worker, {})[key] = body

    async def attempt_ended(self, worker: str, key: str) -> None:
        self._attempts.get(worker, {}).pop(key, None)

    async def attempts_of(self, worker: str) -> dict[str, str]:
        return dict(self._attempts.get(worker, {}))

    async def take_attempt(self, worker: str, key: str) -> bool:
        return self._attempts.get(worker, {}).pop(key, None) is not None

    async def forget_worker(self, worker: str) -> None:
        self._beats.pop(worker, None)
        self._attempts.pop(worker, None)

    async def mark_cancel(self, key: str) -> bool:
        self._marks[key] = time.monotonic()
        return True

    async def cancel_marks(self, keys: Collection[str]) -> set[str]:
        since = time.monotonic() - MARK_TTL_S
        return {k for k in keys if self._marks.get(k, -math.inf) > since}

    async def append(
        self,
        stream_id: str,
        events: Sequence[Mapping[str, Any]],
        *,
        owner: str | None = None,
        by_conversation: bool = False,
        writer: str | None = None,
        seq: int = 0,
    ) -> int:
        stream = self._streams.get(stream_id, [])
        if not events:
            return len(stream) - 1
        if writer is not None:
            seen = self._writers.get((stream_id, writer))
            if seen is not None and seen[0] >= seq:
                return seen[1]  # applied before: its answer was lost
        current = self._claims.get(stream_id)
        claim = claim_stream(stream_id, current, owner, by_conversation, len(stream))
        if claim is not None:
            self._claims[stream_id] = claim
        stream = self._streams.setdefault(stream_id, [])
        stream.extend(decode_batch(len(stream), encode_batch(events)))
        if writer is not None:
            self._writers[(stream_id, writer)] = (seq, len(stream) - 1)
        return len(stream) - 1

    async def read(
        self,
        stream_id: str,
        after: int = -1,
        limit: int | None = None,
        *,
        by_conversation: bool = False,
    ) -> list[StreamEvent]:
        start_after = visible_after(self._claims.get(stream_id), after, by_conversation)
        if start_after is None:
            return []
        stream = self._streams.get(stream_id, [])
        start = max(start_after + 1, 0)
        return stream[start : None if limit is None else start + limit]

    async def claim(self, stream_id: str) -> StreamClaim | None:
        return self._claims.get(stream_id)

    async def last_offset(self, stream_id: str) -> int:
        return len(self._streams.get(stream_id, [])) - 1

    async def delete(self, stream_id: str) -> None:
        self._streams.pop(stream_id, None)
        self._claims.pop(stream_id, None)
        for key in [k for k in self._writers if k[0] == stream_id]:
            del self._writers[key]


# --- the publisher -----------------------------------------------------------------------


FLUSH_INTERVAL_S: Final = 0.015
"""A publisher's shortest time between two appends of chunks (boundaries go out at once):
a token at a model's pace (60 tokens/s is one each 17 ms) is not held back; a faster model's
are grouped, so a stream costs its store at most ~67 appends a second."""

WRITE_TIMEOUT_S: Final = 60.0
"""How long a publisher's boundary (``step_finish``, ``turn_finish``, ``flush``, ...) keeps
retrying a stream it cannot write before it gives up with :class:`StreamUnavailable`."""

RETRY_PAUSE_S: Final = (0.05, 2.0)
"""A failed append is retried after the first pause, doubling up to the second."""


class ChunkPublisher:
    """Batches one producer's events into few backend appends.

    ``publish`` is synchronous and costs a list append: it runs once per model chunk, on
    the path the stall watchdog measures. A background task flushes the first event after
    a boundary at once (a reader's first token is never held back), and after that appends
    at most once per ``flush_interval_s``: an event that finds the last append that long
    ago goes out at once, others wait for the interval's end (or a full ``max_batch``). A
    model slower than one token per interval (60 tokens/s against the default 15 ms) has
    each token sent as it comes; a faster one is grouped, at most ~67 appends a second per
    stream. Boundaries (``step_start``, ``step_finish``, ``tool_result``, ``turn_finish``,
    ``reset``) and ``aclose`` flush before returning, so readers see them promptly and
    nothing is lost when the activity ends.

    Every batch is appended as ``(writer, seq)`` (see ``ChunkStreamBackend.append``), and a
    failed append is retried with the same batch: an append whose answer was lost but that
    the backend applied anyway is written once. ``writer`` is unique to this publisher by
    default; two publishers that publish the same batches (the attempts of one activity
    that publishes one boundary) may share one, and the stream then holds them once.

    A failed background flush is logged and retried (the events stay buffered, in order).
    A boundary retries for up to ``write_timeout_s`` (None: until it succeeds), then raises
    :class:`StreamUnavailable`, and the publisher gives up on the stream.
    ``owner`` and ``by_conversation`` (the run that publishes) go with every append; once
    the backend refuses them (StreamNotOwned) the publisher drops what it holds and every
    later call raises it.
    """

    def __init__(
        self,
        backend: ChunkStreamBackend,
        stream_id: str,
        *,
        step: int | None = None,
        attempt: int | None = None,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        max_batch: int = 256,
        owner: str | None = None,
        by_conversation: bool = False,
        writer: str | None = None,
        write_timeout_s: float | None = WRITE_TIMEOUT_S,
        on_wait: Callable[[str], None] | None = None,
        wait_beat_s: float = 1.0,
    ) -> None:
        if max_batch < 1 or flush_interval_s < 0:
            raise ValueError("max_batch must be >= 1 and flush_interval_s >= 0")
        if write_timeout_s is not None and write_timeout_s <= 0:
            raise ValueError("write_timeout_s must be > 0 (or None: no bound)")
        self.backend = backend
        self.stream_id = stream_id
        self.step = step
        """Stamped on every event published from now on (``step_start`` sets it)."""
        self.attempt = attempt
        """Stamped on every event published from now on (``reset`` sets it)."""
        self.flush_interval_s = flush_interval_s
        self.max_batch = max_batch
        self.owner = owner
        self.by_conversation = by_conversation
        self.refused: StreamNotOwned | None = None
        """Set once the backend refused an append: this run does not own the stream."""
        self.writer = writer or uuid.uuid4().hex
        self.write_timeout_s = write_timeout_s
        self.on_wait = on_wait
        """Called every ``wait_beat_s`` while a boundary waits for the backend (an activity's
        heartbeat: a stream write that hangs is a live worker, not a dead one)."""
        self.wait_beat_s = wait_beat_s
        self.last_offset = -1
        """The last offset this publisher wrote (-1 before its first flush)."""
        self.appends = 0
        """How many backend appends this publisher made."""
        self.dropped = 0
        """Events given up on: buffered or published after a :class:`StreamUnavailable`."""
        self._buf: list[tuple[str, Any, int | None, int | None]] = []
        self._seq = 0
        """The last batch number the backend confirmed (or that may have been applied)."""
        self._inflight: tuple[int, int, list[dict[str, Any]]] | None = None
        """The batch being appended (``seq``, how many buffered events, the wire events):
        a failed append is retried with exactly it."""
        self._failed: StreamUnavailable | None = None
        self._lock = asyncio.Lock()
        self._waiter: asyncio.Future[None] | None = None
        """What the background flusher waits on for the first event into an empty buffer
        (or a full batch, or its interval's end): a future of its own rather than an
        ``asyncio.Event``, one object less per token."""
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._eager = True
        """The next event flushes at once: the first chunk after a boundary (the first
        token a reader waits for) is not held back for ``flush_interval_s``."""
        self._flushed_at = -math.inf
        """When the background flusher last began an append (the event loop's clock)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def pending(self) -> int:
        """Events published but not yet appended."""
        return len(self._buf)

    @property
    def failed(self) -> StreamUnavailable | None:
        """Why this publisher gave up on the stream (None: it has not)."""
        return self._failed

    def publish(self, event_type: str, data: Any = None) -> None:
        """Buffer one event (a dict or a pydantic model, dumped at flush time)."""
        if self.refused is not None:
            raise self.refused
        if self._failed is not None:
            self.dropped += 1
            return
        buf = self._buf
        buf.append((event_type, data, self.step, self.attempt))
        n = len(buf)
        if n == 1 or n >= self.max_batch:
            self._wake()

    def publish_chunk(self, chunk: BaseModel) -> None:
        """Buffer one ``StreamPart`` of the model's stream."""
        self.publish(CHUNK, chunk)

    def _wake(self) -> None:
        if self._closed:
            raise RuntimeError("publish() after aclose()")
        task = self._task
        if task is None or task.done():
            self._task = asyncio.get_running_loop().create_task(self._flusher())
        else:
            self._poke()

    def _poke(self) -> None:
        """Wake the background flusher where it waits (nothing when it does not)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _flusher(self) -> None:
        loop = asyncio.get_running_loop()
        while self._failed is None:
            if not self._buf:
                await self._wait(loop)  # woken by the first event into an empty buffer
                continue
            due = self._flushed_at + self.flush_interval_s
            if not self._eager and len(self._buf) < self.max_batch and due > loop.time():
                timer = loop.call_at(due, self._poke)  # the interval's end
                try:
                    await self._wait(loop)  # or a full batch, whichever comes first
                finally:
                    timer.cancel()
                if len(self._buf) < self.max_batch and loop.time() < due:
                    continue  # woken early (by a reset that emptied the buffer): look again
            try:
                self._flushed_at = loop.time()
                await self._flush(drain=False)
            except StreamNotOwned:
                return  # kept in ``refused``: the next publish or flush raises it
            except Exception as e:
                log.warning("chunk stream %s: flush failed, will retry: %r", self.stream_id, e)
                await asyncio.sleep(max(self.flush_interval_s, 0.1))

    async def _wait(self, loop: asyncio.AbstractEventLoop) -> None:
        """Until ``_poke``: an event into an empty buffer, a full batch, a timer."""
        self._waiter = waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    async def flush(self) -> int:
        """Append everything buffered, in batches of at most ``max_batch``; the last offset.

        A failed append is retried (with a pause of ``RETRY_PAUSE_S``) for up to
        ``write_timeout_s``; then :class:`StreamUnavailable`."""
        if self._failed is not None:
            raise self._failed
        if self.on_wait is None:
            return await self._flush_within_bound()
        beats = asyncio.get_running_loop().create_task(self._beat())
        try:
            return await self._flush_within_bound()
        finally:
            beats.cancel()

    async def _beat(self) -> None:
        assert self.on_wait is not None
        while True:
            await asyncio.sleep(self.wait_beat_s)
            self.on_wait(f"waiting for the chunk stream {self.stream_id}")

    async def _flush_within_bound(self) -> int:
        loop = asyncio.get_running_loop()
        deadline = None if self.write_timeout_s is None else loop.time() + self.write_timeout_s
        pause, error = RETRY_PAUSE_S[0], None
        while True:
            try:
                async with asyncio.timeout_at(deadline) as scope:
                    return await self._flush(drain=True)
            except StreamNotOwned:
                raise  # not an outage: this run lost the stream
            except Exception as e:  # a backend's own timeout too
                if scope.expired():
                    break
                error = e
            if deadline is not None and loop.time() + pause >= deadline:
                break
            log.warning("chunk stream %s: append failed, will retry: %r", self.stream_id, error)
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_PAUSE_S[1])
        assert self.write_timeout_s is not None
        self._give_up(StreamUnavailable(self.stream_id, self.write_timeout_s, error))
        assert self._failed is not None
        raise self._failed

    def _give_up(self, error: StreamUnavailable) -> None:
        self._failed = error
        self.dropped += len(self._buf)
        self._buf.clear()
        self._inflight = None
        log.warning("%s; %d events dropped", error, self.dropped)

    async def _flush(self, drain: bool) -> int:
        """Append the buffer; without ``drain`` only what it held on entry.

        The background flusher must not drain: events published while an append is in
        flight would otherwise go out in a stream of tiny batches, one per round trip,
        instead of waiting for the next interval.
        """
        async with self._lock:
            if self.refused is not None:
                raise self.refused
            buf = self._buf
            todo = len(buf)
            while buf and (drain or todo > 0):
                if self._inflight is None:  # else: the batch whose append failed, again
                    n = min(len(buf) if drain else todo, self.max_batch)
                    self._inflight = (self._seq + 1, n, [encode_event(*i) for i in buf[:n]])
                seq, n, events = self._inflight
                try:
                    self.last_offset = await self.backend.append(
                        self.stream_id,
                        events,
                        owner=self.owner,
                        by_conversation=self.by_conversation,
                        writer=self.writer,
                        seq=seq,
                    )
                except StreamNotOwned as e:
                    self.refused = e
                    self._inflight = None
                    buf.clear()
                    raise
                self.appends += 1
                self._seq, self._inflight = seq, None
                if not drain and self._eager and any(item[0] == CHUNK for item in buf[:n]):
                    self._eager = False  # the first chunk after a boundary went out
                del buf[:n]  # only now: a failed append keeps its events for the retry
                todo -= n
        return self.last_offset

    async def boundary(self, event_type: str, data: Any = None) -> int:
        """Publish one event and flush: boundaries reach readers without the batching delay."""
        self.publish(event_type, data)
        offset = await self.flush()
        self._eager = True
        return offset

    async def reset(self, attempt: int | None = None, reason: str | None = None) -> int:
        """Start a new attempt: drop unflushed events of the old one and write a reset marker.

        Call it first thing in a retried model-step activity (``activity.info().attempt >
        1``); readers then drop the step's partial output (see ``live_events``).
        """
        async with self._lock:
            self._buf.clear()
            if self._inflight is not None:  # it may have been applied: its number is used
                self._seq, self._inflight = self._inflight[0], None
        if attempt is not None:
            self.attempt = attempt
        return await self.boundary(RESET, {"reason": reason} if reason else None)

    async def step_start(self, step: int | None = None, data: Any = None) -> int:
        if step is not None:
            self.step = step
        return await self.boundary(STEP_START, data)

    def open_step(self, step: int | None = None, data: Any = None) -> None:
        """``step_start`` without waiting for it: it goes out at once in the background
        (what a model step uses, so its model call does not wait on the stream's store).
        Ordered before everything published after it; the step's first chunk still goes
        out without the batching delay."""
        if step is not None:
            self.step = step
        self._eager = True
        self.publish(STEP_START, data)

    async def step_finish(self, data: Any = None) -> int:
        """E.g. ``{"finish_reason": ..., "usage": {...}}``."""
        return await self.boundary(STEP_FINISH, data)

    async def tool_result(self, data: Any) -> int:
        """A tool call's result (a ``ToolResultChunk`` or its dict)."""
        return await self.boundary(TOOL_RESULT, data)

    async def tool_wait(self, data: Mapping[str, Any]) -> int:
        """The turn waits for the client's result or approval of one call."""
        return await self.boundary(TOOL_WAIT, data)

    async def turn_finish(self, status: str, data: Mapping[str, Any] | None = None) -> int:
        """The turn's final status: the last event of the stream."""
        return await self.boundary(TURN_FINISH, {**(data or {}), "status": status})

    async def aclose(self) -> None:
        """Flush what is left and stop the background flusher."""
        if self._closed:
            return
        try:
            if self._failed is None:
                await self.flush()
        finally:
            self._closed = True
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
                self._task = None
