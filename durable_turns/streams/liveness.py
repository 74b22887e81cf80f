"""Liveness: a dead worker's model step or tool call recovered in about two seconds.

Temporal learns that the worker running an activity is gone only when the activity's
heartbeats stop for its heartbeat timeout (30 s by default): a reply whose worker was
SIGKILLed froze that long. Liveness takes a cheaper road, through the chunk-stream backend
every worker already writes to (as the cancel marks do, ``streams.cancel``):

* each worker process counts a *beat* there every ``lost_after / 6`` (``beat``), from a
  thread of its own with its own connection, so a busy or blocked event loop does not look
  like a death (a frozen process is still found by its heartbeat timeout);
* a running model step or tool call records its attempt under its worker
  (``attempt_started``; ``ActivityDeps.recorded_attempt``): the activity's task token, and
  what its ``recovering`` event needs (a tool call's: stage ``tool``, its call id and name);
  so does an ``on_chat_response``, after its turn (no stream, so no event: a follow-up it
  submits is what a user waits for), its record written before the hook runs, since user
  code may kill its worker at once;
* every worker watches the beat counts (one read of every count per beat interval). When a
  worker's count has not moved for ``lost_after`` of the watcher's own clock (no clocks are
  compared across machines; only over a span the watcher watched: ``check``), the watcher takes each of its attempts (``take_attempt``: of
  many watchers one wins), publishes the ``recovering`` event on the turn's stream, moves
  the turn's next workflow task off the dead worker's sticky queue, and fails the activity
  by its task token (the public async-completion API) with a ``WorkerLost`` failure that
  names the dead worker as a heartbeat timeout's last heartbeat would (``heartbeats.share``),
  and that the turn counts as a heartbeat timeout (patch ``liveness``). The turn workflow
  then sees what it sees after a heartbeat timeout (the same crash budget; a tool call runs
  again, as after a heartbeat timeout, or says it was interrupted when it is not
  ``retry_safe``), only ~28 s sooner: the history shows an ``ActivityTaskFailed`` where a
  heartbeat timeout leaves an ``ActivityTaskTimedOut``. The failure's detail
  ``LOST_AT_ONCE_KEY`` lets the turn retry with no timer while its losses weigh one death at
  most (``workflows.options.lost_wait``): the detection was the wait.

A worker that is shutting down (SIGTERM: a deploy) does the same for its own running
model steps at once (``hand_over``, before Temporal's graceful shutdown would let them
stream on for the grace and then re-run them from scratch): the ``recovering`` event, the
sticky queue reset, the fail by task token (as ``WorkerShutdown``: counted with the losses
of the infrastructure, not the turn's crash budget), then the step cancelled where it runs,
so it streams no more and saves nothing. Its failure says it was handed over, so the turn
starts the next attempt on another worker at once, with no retry timer (patch ``handover``). Only
when another worker beats: alone, a step may still end within the grace. Tool calls are
left to the grace (a tool may not be safe to run twice, and one cancelled here may not stop
where it runs); their worker beats on while it drains, so no watcher takes them either.

What liveness cannot reach: a local activity (begin, finish or fail turn) runs inside its
turn's workflow task, which no public API fails for a dead worker; the task waits its
timeout, shortened for turns (``contract.TURN_TASK_TIMEOUT_S``). Activities that record no
attempt (a compaction, a sub-agent's relay) keep their heartbeat timeout.

A worker declared dead that is in fact alive (cut off from the backend, or starved of CPU
for longer than ``lost_after``) is safe for the reply: its activity's completion, heartbeats
and fails are refused by Temporal (the attempt is over), and what it still streams carries
an older attempt number than the new attempt's ``reset``, which readers drop
(``live_events``); the cost is the work of a re-run, and for a tool call, a second run of
the tool while the first may still be running (as after a heartbeat timeout; the call id is
the tool's idempotency key). The recovering event carries the writer and batch number the
next attempt's own one uses (``activities.recovery.announce``), so the stream holds it once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from durable_turns.contract import (
    HANDED_OVER_KEY,
    LOST_AT_ONCE_KEY,
    SHARE_KEY,
    WORKER_LOST,
    WORKER_SHUTDOWN,
)
from durable_turns.streams.base import RECOVERING, ChunkStreamBackend, encode_event

log = logging.getLogger(__name__)

FORGET_AFTER_S = 120.0
"""A worker silent this long with no attempt left is dropped from the backend."""

LOST_MESSAGE = "the worker running it stopped (no liveness beat for {:.1f} s)"

HANDED_OVER_MESSAGE = "the worker running it is shutting down: handed over to another worker"

RECORD_WAIT_S = 1.0
"""The longest an attempt waits for its record to be written first (``running``)."""

CHAT_RESPONSE_STAGE = "chat_response"
"""The stage of an ``on_chat_response`` attempt: after its turn, so no stream to announce on."""


@dataclass
class AttemptRecord:
    """What a watcher needs to recover one attempt of a dead worker: a model step's, or
    (``stage`` "tool") a tool call's."""

    task_token: str
    """The activity's task token, base64."""
    workflow_id: str
    run_id: str
    namespace: str
    stream_id: str
    owner: str | None
    by_conversation: bool
    step: int
    attempt: int
    failures: int
    stage: str = "stream"
    """The ``recovering`` event's stage: "stream" (a model step) or "tool" (a tool call);
    "chat_response" for an ``on_chat_response`` (its turn has ended: ``stream_id`` is empty
    and no event is written)."""
    tool_call_id: str = ""
    tool_name: str = ""

    @property
    def what(self) -> str:
        """The attempt, as a log line names it."""
        if self.stage == "tool":
            return f"tool {self.tool_name} ({self.tool_call_id}) of step {self.step}"
        if self.stage == CHAT_RESPONSE_STAGE:
            return "on_chat_response"
        return f"model step {self.step}"

    def body(self) -> str:
        return json.dumps(self.__dict__, separators=(",", ":"))

    @classmethod
    def parse(cls, body: str) -> AttemptRecord:
        return cls(**json.loads(body))

    def recovering_writer(self) -> tuple[str, int, int]:
        """The next attempt's recovering event: its writer, its wire event and its data
        (as ``activities.recovery.announce`` writes them; the next attempt's deaths are
        this attempt's number less its failures)."""
        nxt, deaths = self.attempt + 1, self.attempt - self.failures
        once = f"{RECOVERING}:{self.stage}:{self.step}:{self.tool_call_id}:{nxt}:{deaths}"
        return f"{self.run_id}/{once}", nxt, deaths


@dataclass
class Liveness:
    """One worker process's liveness: its beats (a thread), its running attempts, and the
    watch over the other workers. ``start`` in the worker's run, ``stop`` after it."""

    backend: ChunkStreamBackend
    open_backend: Callable[[], ChunkStreamBackend]
    """A second connection to the same backend, for the beating thread's own loop."""
    client: Client
    worker: str
    lost_after_s: float
    lost: int = 0
    """Attempts this worker recovered for dead workers."""
    _seen: dict[str, tuple[int, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _watch: asyncio.Task[None] | None = None
    _pending: set[asyncio.Task[Any]] = field(default_factory=set)
    _mine: dict[str, tuple[AttemptRecord, asyncio.Task[Any]]] = field(default_factory=dict)
    """This worker's running attempts, by key: their records and the tasks running them."""
    handed_over: int = 0
    """Attempts this worker handed over at its shutdown (``hand_over``)."""
    _handed: set[str] = field(default_factory=set)
    _warned_at: float = -float("inf")
    _looked_at: float | None = None
    """When this watcher's last read of the beats ended (its own clock)."""

    @property
    def interval_s(self) -> float:
        return max(self.lost_after_s / 6, 0.02)

    async def start(self) -> None:
        self._thread = threading.Thread(
            target=self._beat_thread, name="turns-liveness", daemon=True
        )
        self._thread.start()
        self._watch = asyncio.get_running_loop().create_task(self._watch_loop())

    async def stop(self, *, forget: bool = True) -> None:
        """Stop beating and watching; ``forget``: drop this worker's records (a graceful
        stop: its attempts have ended)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)
        if forget:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.backend.forget_worker(self.worker), 2.0)

    # --- this worker's beats --------------------------------------------------------------

    def _beat_thread(self) -> None:
        asyncio.run(self._beats())

    async def _beats(self) -> None:
        backend = self.open_backend()
        try:
            await backend.open()
            while not self._stop.is_set():
                try:
                    await asyncio.wait_for(backend.beat(self.worker), self.lost_after_s)
                except Exception as e:  # the backend is out of reach: so are our streams
                    self._warn("liveness beat not written (will retry): %r", e)
                await asyncio.sleep(self.interval_s)
        finally:
            with contextlib.suppress(Exception):
                await backend.close()

    # --- this worker's attempts -----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(
        self, key: str, record: AttemptRecord, *, written_first: bool = False
    ) -> AsyncIterator[None]:
        """Record an attempt for as long as the block runs (best effort: a backend that does
        not answer leaves the attempt to its heartbeat timeout). The record is written beside
        the block, off its path; ``written_first``: before it (for at most
        ``RECORD_WAIT_S``), for a block that may kill its worker at once (user code)."""
        started = asyncio.get_running_loop().create_task(
            self.backend.attempt_started(self.worker, key, record.body())
        )
        self._keep(started)
        task = asyncio.current_task()
        if task is not None:
            self._mine[key] = (record, task)
        try:
            if written_first:  # never cancels the write nor raises its error; a cancel passes
                await asyncio.wait({started}, timeout=RECORD_WAIT_S)
            yield
        except asyncio.CancelledError:
            if key not in self._handed or task is None:
                raise
            task.uncancel()  # its hand-over's cancel, said as such (the server refuses it)
            raise ApplicationError(
                HANDED_OVER_MESSAGE, type=WORKER_SHUTDOWN, category=ApplicationErrorCategory.BENIGN
            ) from None
        finally:
            self._mine.pop(key, None)
            ended = asyncio.get_running_loop().create_task(self._end(started, key))
            self._keep(ended)

    async def _end(self, started: asyncio.Task[None], key: str) -> None:
        with contextlib.suppress(BaseException):
            await started  # so the end is never written before the start
        try:
            await self.backend.attempt_ended(self.worker, key)
        except Exception as e:  # a stale record costs a refused fail, no more
            self._warn("liveness record of an attempt not removed: %r", e)

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def hand_over(self, message: str = HANDED_OVER_MESSAGE) -> int:
        """At this worker's shutdown, before Temporal's graceful one: end each of its running
        model-step attempts at once, as a watcher ends a dead worker's (``_end_attempt``),
        failed as ``WorkerShutdown`` (a loss of the infrastructure's, retried at once, not
        charged to the turn's crash budget), then cancel it here, so it streams no more and
        saves nothing (a cancel that is not the user's keeps no partial step). The next
        attempt, on a live worker, starts about a second later instead of after the grace.
        Nothing is handed over when no other worker beats (``others_alive``): a step may then
        still end within the grace. Returns how many were handed over."""
        if not self.others_alive():  # nobody to take them: the grace may see them end
            return 0
        # tool calls and on_chat_response are left to the grace: user code may not be safe
        # to run twice, and one cut short here would run again while nothing says it
        # stopped where it runs
        mine = [(k, v) for k, v in self._mine.items() if v[0].stage == "stream"]
        for key, _ in mine:
            del self._mine[key]

        async def one(key: str, record: AttemptRecord, task: asyncio.Task[Any]) -> None:
            if task.done():
                return
            log.warning(
                "turn %s: %s attempt %d handed over: %s",
                record.workflow_id,
                record.what,
                record.attempt,
                message,
            )
            details = {SHARE_KEY: self.worker, HANDED_OVER_KEY: True}  # no retry wait
            error = ApplicationError(message, details, type=WORKER_SHUTDOWN)
            try:
                await self._end_attempt(record, "worker_shutdown", error)
            finally:
                self._handed.add(key)
                task.cancel()  # the server refuses whatever it still reports
            self.handed_over += 1
            with contextlib.suppress(Exception):
                await self.backend.take_attempt(self.worker, key)

        await asyncio.gather(*(one(k, r, t) for k, (r, t) in mine), return_exceptions=True)
        return self.handed_over

    def others_alive(self) -> bool:
        """Whether another worker's beat count moved within ``lost_after`` (as this
        worker's watch last saw them: no round trip)."""
        now = time.monotonic()
        return any(now - moved < self.lost_after_s for _, moved in self._seen.values())

    # --- the watch over the others --------------------------------------------------------

    async def _watch_loop(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(self.interval_s)
            try:
                await self.check()
            except Exception as e:  # the heartbeat timeout still holds
                self._warn("liveness not checked (will retry): %r", e)

    async def check(self) -> list[str]:
        """One look at every worker's beats; recover the attempts of the silent ones.
        Returns the workers found silent.

        A silence is judged only over a span this watcher watched: after a gap of more than
        ``lost_after / 2`` between its reads (its own loop starved, or the backend stalled,
        which holds the others' beats back too), every clock starts again, so a stall of the
        backend is not taken for the death of every worker (a tool call would then run
        twice)."""
        beats = await self.backend.beats()
        now = time.monotonic()
        looked, self._looked_at = self._looked_at, now
        if looked is None or now - looked > self.lost_after_s / 2:
            self._seen = {w: (c, now) for w, c in beats.items() if w != self.worker}
            return []
        silent = []
        for worker, count in beats.items():
            if worker == self.worker:
                continue
            seen = self._seen.get(worker)
            if seen is None or seen[0] != count:
                self._seen[worker] = (count, now)
                continue
            if now - seen[1] >= self.lost_after_s:
                silent.append(worker)
                await self._recover(worker, now - seen[1])
        for worker in list(self._seen):
            if worker not in beats:
                del self._seen[worker]
        return silent

    async def _recover(self, worker: str, silent_s: float) -> None:
        attempts = await self.backend.attempts_of(worker)
        if not attempts:
            if silent_s >= FORGET_AFTER_S:
                await self.backend.forget_worker(worker)
            return
        turns = len({AttemptRecord.parse(b).workflow_id for b in attempts.values()})
        for key, body in attempts.items():
            if await self.backend.take_attempt(worker, key):
                self.lost += 1
                await self._fail(AttemptRecord.parse(body), worker, turns, silent_s)

    async def _fail(self, rec: AttemptRecord, worker: str, turns: int, silent_s: float) -> None:
        message = LOST_MESSAGE.format(silent_s)
        # on_chat_response's attempts are the conversation's to count; its record has none
        counted = "" if rec.stage == CHAT_RESPONSE_STAGE else f" attempt {rec.attempt}"
        log.warning("turn %s: %s%s: %s %s", rec.workflow_id, rec.what, counted, worker, message)
        details = {SHARE_KEY: worker, "turns": turns, LOST_AT_ONCE_KEY: True}
        error = ApplicationError(message, details, type=WORKER_LOST)
        await self._end_attempt(rec, "worker_lost", error)

    async def _end_attempt(self, rec: AttemptRecord, reason: str, error: ApplicationError) -> None:
        """End an attempt from outside it, as its workflow would see its worker go: the
        ``recovering`` event on its stream (what the user sees first; the next attempt's own
        one is then the same batch), the turn's next workflow task off the worker's sticky
        queue, and the activity failed with ``error`` by its task token."""
        if rec.stream_id:
            await self._announce(rec, reason, error)
        with contextlib.suppress(Exception):  # its next task to a live worker's queue
            await self.client.workflow_service.reset_sticky_task_queue(
                ResetStickyTaskQueueRequest(
                    namespace=rec.namespace,
                    execution=WorkflowExecution(workflow_id=rec.workflow_id, run_id=rec.run_id),
                )
            )
        handle = self.client.get_async_activity_handle(task_token=base64.b64decode(rec.task_token))
        try:
            await handle.fail(error)
        except Exception as e:  # it ended meanwhile, or was recovered by another watcher
            log.info("turn %s: attempt not failed: %r", rec.workflow_id, e)

    async def _announce(self, rec: AttemptRecord, reason: str, error: ApplicationError) -> None:
        """The ``recovering`` event on the attempt's stream (a stream that cannot be written
        is logged: the next attempt publishes the same event anyway)."""
        writer, nxt, deaths = rec.recovering_writer()
        data: dict[str, Any] = {
            "stage": rec.stage,
            "reason": reason,
            "message": error.message,
            "attempt": nxt,
            "deaths": deaths,
        }
        if rec.stage == "tool":  # as ``activities.recovery.announce`` says a tool call's
            data["tool_call_id"] = rec.tool_call_id
            data["tool_name"] = rec.tool_name
        event = encode_event(RECOVERING, data, step=rec.step, attempt=nxt)
        try:
            await asyncio.wait_for(
                self.backend.append(
                    rec.stream_id,
                    [event],
                    owner=rec.owner,
                    by_conversation=rec.by_conversation,
                    writer=writer,
                    seq=1,
                ),
                self.lost_after_s + 5,
            )
        except Exception as e:  # the next attempt publishes it anyway
            log.warning("turn %s: recovering event not written: %r", rec.workflow_id, e)

    def _warn(self, message: str, error: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned_at > 60:
            self._warned_at = now
            log.warning(message, error)
