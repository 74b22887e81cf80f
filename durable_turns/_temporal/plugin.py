"""``DurableTurnsPlugin``: the engine as a temporalio plugin, for a team's own client, worker
and replayer.

    plugin = DurableTurnsPlugin(Settings.from_env())
    client = await Client.connect(address, plugins=[plugin])
    worker = Worker(client, task_queue=plugin.settings.task_queue,
                    workflows=[TheirOwnWorkflow], activities=[their_activity])

On the client it sets the data converter (pydantic, encrypted with ``TURNS_ENCRYPTION_KEYS``)
and bounds updates (:mod:`.interceptors`); a worker built on that client gets, beside the
team's own, the engine's two workflows (run by :class:`.runner.EngineWorkflowRunner`, the
team's keep their runner), its activities and their interceptor, and around its run opens the
transcript store and the chunk stream and closes them after. A ``Replayer`` given the plugin
replays the engine's histories with the same converter and runner. ``turns worker`` is this
plugin on a worker of its own (``durable_turns.runtime.running_worker``).

Worker options are the team's: what ``turns worker`` sets besides the plugin (200 concurrent
activities, a 2 s sticky queue timeout, the graceful shutdown and heartbeat interval of
:func:`durable_turns.activities.heartbeats.worker_options`) is in ``docs/deployment.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Replayer, WorkerConfig, WorkflowReplayResult, WorkflowRunner

from durable_turns._temporal.interceptors import UpdateSizeBound, answerable_bytes
from durable_turns._temporal.runner import EngineWorkflowRunner, precompile_workflow_modules
from durable_turns.activities.errors import ExpectedErrors
from durable_turns.activities.heartbeats import SharedWorker
from durable_turns.config import Settings

PLUGIN_NAME = "durable-turns"

HAND_OVER_S = 5.0
"""The longest a shutdown waits for its model steps to be handed over (then the grace holds)."""

log = logging.getLogger(__name__)


class DurableTurnsPlugin(SimplePlugin):
    """The engine for a team's own client, worker and ``Replayer``.

    ``settings``: the engine's configuration (None: ``Settings.from_env()``); ``hooks``,
    ``tools``: instead of the ones ``settings`` names (``TURNS_HOOKS``, ``TURNS_TOOLS``);
    ``store``: a transcript store instead of ``settings``'s (opened and closed by the worker's
    run); ``blob_limit``: the namespace's blob size limit, when not Temporal's 2 MiB. Nothing
    is built until a worker needs it: a client alone only gets the converter and the bound.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        hooks: Any = None,
        tools: Any = None,
        store: Any = None,
        blob_limit: int | None = None,
    ) -> None:
        from durable_turns.codec import data_converter_from_env

        self.settings = settings if settings is not None else Settings.from_env()
        self._hooks, self._tools, self._store = hooks, tools, store
        self._converter = data_converter_from_env()
        self._deps: Any = None
        self._client: Any = None
        self.opened = asyncio.Event()
        """Set once a worker's run has opened the store and the chunk stream: a worker that
        waits for it before saying it is ready fails at start on an unreachable store."""
        super().__init__(
            PLUGIN_NAME,
            data_converter=self._data_converter,
            interceptors=[
                UpdateSizeBound(self._converter.payload_converter, answerable_bytes(blob_limit)),
                SharedWorker(),
                ExpectedErrors(),
            ],
            workflows=self._add_workflows,
            activities=self._activities,
            workflow_runner=self._runner,
            run_context=self._running,
        )

    # --- client, worker and replayer ------------------------------------------------------

    def _data_converter(self, existing: DataConverter | None) -> DataConverter:
        """The engine's converter; a team's codec is kept (one codec only: two are an error),
        and a payload converter of the team's own other than the SDK's default or pydantic is
        refused (the engine's models need pydantic's)."""
        ours = self._converter
        if existing is None or existing is ours:
            return ours
        kind = existing.payload_converter_class
        if kind is not DataConverter.default.payload_converter_class and not issubclass(
            kind, PydanticPayloadConverter
        ):
            raise ValueError(
                f"DurableTurnsPlugin: the client's payload converter {kind.__name__} is"
                " neither the SDK's default nor pydantic's; the engine needs pydantic's"
                " (temporalio.contrib.pydantic), which also converts what the default does"
            )
        theirs = existing.payload_codec
        if theirs is None or theirs == ours.payload_codec:
            return ours
        if ours.payload_codec is not None:
            raise ValueError(
                "DurableTurnsPlugin: the client has a payload codec and TURNS_ENCRYPTION_KEYS"
                " sets another; keep one of them"
            )
        from durable_turns.codec import with_codec

        return with_codec(ours, theirs)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        client = config.get("client")
        self._client = client
        converter = client.data_converter if client is not None else None
        if converter is not None and not issubclass(
            converter.payload_converter_class, PydanticPayloadConverter
        ):
            raise ValueError(
                "DurableTurnsPlugin: the worker's client has no pydantic data converter: give"
                " the plugin to Client.connect(plugins=[…]) (its workers then get it too),"
                " not to the Worker alone"
            )
        return super().configure_worker(config)

    @staticmethod
    def engine_workflows() -> list[type]:
        """The engine's workflows (imported on first use: a client never needs them)."""
        from durable_turns.workflows.conversation import ConversationWorkflow
        from durable_turns.workflows.turn import TurnWorkflow

        return [ConversationWorkflow, TurnWorkflow]

    def _add_workflows(self, existing: Sequence[type] | None) -> list[type]:
        return [*(existing or []), *self.engine_workflows()]

    def _runner(self, existing: WorkflowRunner | None) -> WorkflowRunner:
        workflows = self.engine_workflows()
        if self.settings.workflow_sandbox:
            precompile_workflow_modules(w.__module__ for w in workflows)
        return EngineWorkflowRunner(workflows, existing, self.settings.workflow_sandbox)

    def _activities(self, existing: Sequence[Callable[..., Any]] | None) -> list[Any]:
        from durable_turns.activities import all_activities

        return [*(existing or []), *all_activities(self.deps())]

    def deps(self) -> Any:
        """The activities' dependencies (``ActivityDeps``), built on first use: the store, the
        providers, the tools, the hooks; opened by :meth:`_running`."""
        if self._deps is None:
            from durable_turns.activities import ActivityDeps
            from durable_turns.models import ModelRegistry
            from durable_turns.store import open_store
            from durable_turns.streams import open_stream_backend
            from durable_turns.user_code import load_hooks, load_tools

            settings = self.settings
            self._deps = ActivityDeps(
                self._store or open_store(settings.resolved_store_url),
                ModelRegistry.for_worker(settings),
                self._tools or load_tools(settings.tools),
                self._hooks or load_hooks(settings.hooks),
                settings,
                None,
                open_stream_backend(settings.resolved_chunk_stream_url),
            )
        return self._deps

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        """Around a worker's run: the user's transforms loaded, the session configured, the
        store and the chunk stream open; closed after."""
        from durable_turns.activities import isolation
        from durable_turns.activities.lifecycle import call_hook
        from durable_turns.hooks import Session
        from durable_turns.user_code import load_user_transforms

        deps = self.deps()
        isolation.configure(self.settings.user_loops)
        load_user_transforms(self.settings.transforms)
        deps.session_source = await call_hook(deps.hooks.configure_session(Session()))
        await deps.store.open()
        try:
            if deps.streams is not None:
                await deps.streams.open()
            liveness = await self._start_liveness(deps)
            try:
                self.opened.set()
                yield
            finally:
                self.opened.clear()
                if liveness is not None:
                    deps.liveness = None
                    await liveness.stop()
                if deps.streams is not None:
                    await deps.streams.close()
        finally:
            await deps.models.aclose()
            await deps.store.close()

    async def hand_over(self, timeout_s: float = HAND_OVER_S) -> int:
        """Hand this worker's running model steps over to the other workers at once
        (``streams.liveness``'s ``Liveness.hand_over``): call it as a shutdown begins, before
        ``Worker.shutdown()`` (``turns worker`` does on SIGTERM), so a reply moves on within
        about a second rather than streaming on for the shutdown grace and then starting
        again from scratch. Tool calls are left to finish within the grace. Returns how many
        were handed over (none when liveness is off: then the grace is waited as before)."""
        liveness = None if self._deps is None else self._deps.liveness
        if liveness is None:
            return 0
        try:
            return int(await asyncio.wait_for(liveness.hand_over(), timeout_s))
        except Exception as e:  # the grace still holds
            log.warning("model steps not handed over: %r", e)
            return 0

    async def _start_liveness(self, deps: Any) -> Any:
        """This worker process's liveness (``streams.liveness``): beats in the chunk stream
        and the watch over the other workers; None when the stream keeps none or
        ``TURNS_LIVENESS_MS`` is off."""
        from durable_turns.activities.heartbeats import WORKER_PROCESS
        from durable_turns.streams import open_stream_backend
        from durable_turns.streams.liveness import Liveness

        settings = self.settings
        streams = deps.streams
        if streams is None or not streams.keeps_liveness or settings.liveness_ms <= 0:
            return None
        if self._client is None:
            return None
        url = settings.resolved_chunk_stream_url
        liveness = Liveness(
            streams,
            lambda: open_stream_backend(url) or streams,
            self._client,
            WORKER_PROCESS,
            settings.liveness_ms / 1000,
        )
        await liveness.start()
        deps.liveness = liveness
        return liveness

    @contextlib.asynccontextmanager
    async def run_replayer(
        self,
        replayer: Replayer,
        histories: AsyncIterator[WorkflowHistory],
        next: Callable[
            [Replayer, AsyncIterator[WorkflowHistory]],
            contextlib.AbstractAsyncContextManager[AsyncIterator[WorkflowReplayResult]],
        ],
    ) -> AsyncIterator[AsyncIterator[WorkflowReplayResult]]:
        """A replay runs no activity: nothing is opened for it."""
        async with next(replayer, histories) as results:
            yield results
