"""What every activity shares: the worker's store, providers, tools, hooks and settings.

The runtime builds one ``ActivityDeps`` per worker and hands it to each activity module;
the helpers here are the few things more than one activity needs (loading the turn,
resolving a model, the tools a step is offered, the live chunk stream). Heartbeats are in
``activities.heartbeats``; the store they see waits out outages (``activities.patient_store``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_turns.activities import heartbeats
from durable_turns.activities.errors import EXPECTED, INVALID_MODEL, crash_loop, taken_over
from durable_turns.activities.lifecycle import Lifecycle, call_hook
from durable_turns.activities.patient_store import PatientStore
from durable_turns.agents import AgentTool, AgentTools
from durable_turns.config import Settings
from durable_turns.contract import UNKNOWN_AGENT, TurnRef
from durable_turns.hooks import TurnHooks
from durable_turns.hooks.session import Session
from durable_turns.hooks.types import ToolSpec, TurnConfig
from durable_turns.models import ModelProvider, ModelRegistry, ProviderError
from durable_turns.store import (
    TranscriptStore,
    TurnRecord,
    TurnState,
)
from durable_turns.store.base import owns
from durable_turns.streams import ChunkPublisher, ChunkStreamBackend, StreamUnavailable
from durable_turns.streams.base import StreamNotOwned
from durable_turns.streams.cancel import CancelWatch
from durable_turns.streams.liveness import CHAT_RESPONSE_STAGE, AttemptRecord, Liveness
from durable_turns.tools import ToolRegistry


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
    default_system: str | None = None
    """The system prompt when neither the turn's config nor the session gives one (None: the
    hooks' ``system_prompt``); an agent tool's ``system``."""
    root: ActivityDeps | None = None
    """A sub-agent's dependencies: the worker's own, which they share everything but the
    hooks, tools and settings with (None: these are the worker's own)."""
    liveness: Liveness | None = None
    """This worker's liveness (``streams.liveness``), set by the worker's run (None: off)."""
    lifecycle: Lifecycle = field(init=False)
    _agents: dict[str, ActivityDeps] = field(init=False, default_factory=dict)
    _cancel_watch: CancelWatch | None = field(init=False, default=None)
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
        """How often a streaming model step heartbeats. A step that watches its cancel mark
        (``cancel_watch``) heartbeats for liveness only, as hooks and tools do; one that
        cannot (no chunk stream, a sub-agent's or a directly started turn) learns of a cancel
        from its heartbeats: twice per ``cancel_check_ms``, so the SDK always has one to send
        when its throttle lets the next through."""
        if self.settings.cancel_check_ms <= 0 or heartbeats.watched():
            return self.beat_every
        return min(self.beat_every, max(self.settings.cancel_check_ms / 2000, 0.05))

    def cancel_watch(self, turn: TurnRef) -> CancelWatch | None:
        """The worker's look-out for cancel marks (``streams.cancel``), for a step of a
        conversation's turn (the marks name a conversation's request); None when the chunk
        stream keeps no marks or ``cancel_check_ms`` is 0."""
        streams = self.streams
        if streams is None or not streams.keeps_marks or self.settings.cancel_check_ms <= 0:
            return None
        if not turn.by_conversation or turn.agent:
            return None
        root = self.root or self
        if root._cancel_watch is None:
            root._cancel_watch = CancelWatch(streams, self.settings.cancel_check_ms / 2000)
        return root._cancel_watch

    @contextlib.asynccontextmanager
    async def recorded_attempt(
        self, turn: TurnRef | None, step: int = 0, tool: tuple[str, str] | None = None
    ) -> AsyncIterator[None]:
        """While the block runs, the running model step's attempt (``tool``: the tool call's,
        its id and name; no ``turn``: an ``on_chat_response``'s, after its turn) is recorded
        under this worker, so that the other workers recover it within ``TURNS_LIVENESS_MS``
        of the worker's death (``streams.liveness``); nothing when liveness is off."""
        liveness = (self.root or self).liveness
        info = activity.info()
        if liveness is None or info.is_local:
            yield
            return
        number = heartbeats.attempt()
        record = AttemptRecord(
            task_token=base64.b64encode(info.task_token).decode(),
            workflow_id=info.workflow_id or "",
            run_id=info.workflow_run_id or "",
            namespace=info.namespace,
            stream_id=turn.turn_id if turn is not None else "",
            owner=turn.owner if turn is not None else None,
            by_conversation=turn.by_conversation if turn is not None else False,
            step=step,
            attempt=number,
            failures=heartbeats.failures(number),
        )
        if tool is not None:
            record.stage, (record.tool_call_id, record.tool_name) = "tool", tool
        elif turn is None:
            record.stage = CHAT_RESPONSE_STAGE
        key = f"{info.workflow_run_id}/{info.activity_id}"
        # a model step or tool call records itself beside its work; a hook, at once first
        async with liveness.running(key, record, written_first=turn is None):
            yield

    def of(self, turn: TurnRef | str | None) -> ActivityDeps:
        """The dependencies a turn runs with: these, or (``TurnRef.agent``) its agent tool's:
        the agent's hooks and session, only its tools, its model and step limit, and
        everything else of the worker's. Raises a non-retryable ``UnknownAgent`` when the
        worker has no agent tool of that name."""
        agent = turn.agent if isinstance(turn, TurnRef) else turn
        if not agent:
            return self
        root = self.root or self
        deps = root._agents.get(agent)
        if deps is None:
            deps = root._agents[agent] = root._agent_deps(agent)
        return deps

    def _agent_deps(self, name: str) -> ActivityDeps:
        tool = self.tools.get(name)
        if not isinstance(tool, AgentTool) or tool.agent is None:
            raise ApplicationError(
                f"this worker has no agent tool named {name!r} (its tools modules must"
                " define it on every worker of the task queue)",
                type=UNKNOWN_AGENT,
                non_retryable=True,
                category=EXPECTED,
            )
        spec = tool.agent
        settings = dataclasses.replace(
            self.settings,
            model=spec.model or self.settings.model,
            max_steps=spec.max_steps or self.settings.max_steps,
        )
        return ActivityDeps(
            self.store,
            self.models,
            AgentTools(self.tools, spec.tools),
            spec.hooks,
            settings,
            call_hook(spec.hooks.configure_session(Session())),
            self.streams,
            default_system=spec.system,
            root=self,
        )

    async def session(self) -> Session:
        if not isinstance(self.session_source, Session):
            async with self._session_lock:
                if not isinstance(self.session_source, Session):
                    self.session_source = await self.session_source  # type: ignore[misc]
        assert isinstance(self.session_source, Session)
        return self.session_source

    async def turn(self, ref: TurnRef) -> TurnRecord:
        """The turn's record, if this run (``ref.owner``) owns the turn, else TurnTakenOver."""
        return _owned(ref, await self.store.get_turn(ref.turn_id))

    async def turn_state(self, ref: TurnRef, *, transcript: bool = False) -> TurnState:
        """The turn's record, steps and tool results (and ``transcript``: its conversation's
        messages) in one store round trip, if this run owns the turn, else TurnTakenOver."""
        state = await self.store.turn_state(ref.turn_id, transcript=transcript)
        _owned(ref, state.turn if state else None)
        assert state is not None
        return state

    async def system(self, config: TurnConfig) -> str:
        if config.system is not None:
            return config.system
        default = self.default_system or self.hooks.system_prompt
        return await (await self.session()).system_prompt(default)

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
            raise ApplicationError(
                str(e), type=INVALID_MODEL, non_retryable=True, category=EXPECTED
            ) from e

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

    def check_crashes(self, turn: TurnRecord, stage: str) -> None:
        """Raise ``WorkerCrashLoop`` when the local activity ``turn.running`` names (marked
        with ``store.base.started``) found its earlier attempts dead once more than
        ``TURNS_CRASH_RETRIES`` allows: it is not run again."""
        deaths = turn.crashes.get(turn.running or "", 0)
        if deaths > self.settings.crash_retries:
            raise crash_loop(stage, deaths, self.settings.crash_retries)

    @contextlib.asynccontextmanager
    async def publisher(
        self, turn: TurnRef | TurnRecord, step: int | None, *, once: str | None = None
    ) -> AsyncIterator[ChunkPublisher | None]:
        """The turn's live chunk stream (None when streaming is off); always flushed.

        Every append names this run (``turn.owner``); a stream another run owns refuses
        them, and the activity fails with TurnTakenOver. Its boundaries wait at most
        ``stream_write_timeout_s`` (then ``StreamUnavailable``), and the activity heartbeats
        while they wait. ``once`` names what this activity publishes the same in every
        attempt (a tool result, the turn's end): its attempts share one writer, so the
        stream holds it once, however many attempts published it."""
        if self.streams is None:
            yield None
            return
        info = activity.info()
        # the run and what is published, not the activity: the workflow retries a tool call
        # as a new activity, and a retry must write as the same writer
        writer = f"{info.workflow_run_id}/{once}" if once else None
        publisher = ChunkPublisher(
            self.streams,
            turn.turn_id,
            step=step,
            attempt=heartbeats.attempt(),
            owner=turn.owner,
            by_conversation=turn.by_conversation,
            writer=writer,
            write_timeout_s=self.settings.stream_write_timeout_s,
            # a local activity has no heartbeat: the SDK keeps its workflow task alive
            on_wait=None if info.is_local else activity.heartbeat,
            wait_beat_s=self.beat_every,
        )
        try:
            try:
                yield publisher
            except BaseException:
                # the activity's own error wins over the stream's
                with contextlib.suppress(StreamUnavailable, StreamNotOwned):
                    await publisher.aclose()
                raise
            await publisher.aclose()
        except StreamNotOwned as e:
            raise taken_over(turn.turn_id, "its live stream belongs to another run") from e


def _owned(ref: TurnRef, turn: TurnRecord | None) -> TurnRecord:
    """``turn`` if ``ref``'s run owns it (adopting a record from before owners), else an
    error: never begun, or TurnTakenOver."""
    if turn is None:
        raise ApplicationError(f"turn {ref.turn_id} was never begun", non_retryable=True)
    if not owns(turn.owner, ref.owner):
        raise taken_over(ref.turn_id)
    if ref.owner:
        turn.owner = ref.owner
    return turn
