"""The worker: builds the client, registers the workflows and activities, and runs.

    python worker.py [--tools MODULE] [--hooks MODULE:CLASS] [--task-queue Q]
    turns worker     (the same)

With no ``TEMPORAL_ADDRESS`` it starts the embedded Temporal dev server itself (UI on
:8233, data under ``TURNS_DATA_DIR``) and stops it on exit; with it set, it connects there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import signal
import sys
from collections.abc import AsyncIterator
from datetime import timedelta

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from durable_turns.activities import ActivityDeps, all_activities
from durable_turns.activities.deps import worker_options
from durable_turns.activities.lifecycle import call_hook
from durable_turns.codec import data_converter_from_env
from durable_turns.config import Settings
from durable_turns.contract import SEARCH_ATTRIBUTES
from durable_turns.devserver import EmbeddedServer
from durable_turns.hooks import Session, TurnHooks
from durable_turns.models import ModelRegistry
from durable_turns.store import TranscriptStore, open_store
from durable_turns.streams import open_stream_backend
from durable_turns.tools import ToolRegistry
from durable_turns.transforms import load_transforms
from durable_turns.workflows.conversation import ConversationWorkflow
from durable_turns.workflows.turn import TurnWorkflow

log = logging.getLogger("durable_turns.worker")

STICKY_TIMEOUT = timedelta(seconds=2)

WORKFLOWS = [ConversationWorkflow, TurnWorkflow]

# Modules the workflow sandbox may share with the worker instead of re-importing:
# pydantic (models cross the boundary as instances) and the wire contract (pure data). Never
# the workflow modules themselves: they must be re-imported under the sandbox's restrictions.
PASSTHROUGH = [
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "durable_turns.contract",
    "durable_turns.messages",
]


def sandbox_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    )


def load_hooks(spec: str | None) -> TurnHooks:
    """``module:Class`` → an instance of that TurnHooks subclass (default hooks without one)."""
    if not spec:
        return TurnHooks()
    module_name, _, class_name = spec.partition(":")
    if not class_name:
        raise ValueError(f"--hooks takes module:Class, got {spec!r}")
    cls = getattr(importlib.import_module(module_name), class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, TurnHooks)):
        raise ValueError(f"{spec!r} is not a TurnHooks subclass")
    return cls()


def load_tools(modules: list[str]) -> ToolRegistry:
    registry = ToolRegistry()
    registry.load_module("durable_turns.demo_tools")
    for module in modules:
        registry.load_module(module)
    return registry


async def connect(settings: Settings) -> Client:
    """The client (and so the worker's runtime), with metrics and tracing when configured."""
    runtime = None
    if settings.prometheus_bind:
        runtime = Runtime(
            telemetry=TelemetryConfig(
                metrics=PrometheusConfig(bind_address=settings.prometheus_bind)
            )
        )
    interceptors = []
    if settings.otel:
        try:
            from temporalio.contrib.opentelemetry import TracingInterceptor
        except ImportError as e:
            raise ValueError(
                "TURNS_OTEL needs the 'otel' extra: pip install 'durable-turns[otel]'"
            ) from e
        interceptors.append(TracingInterceptor())
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        data_converter=data_converter_from_env(),
        interceptors=interceptors,
        runtime=runtime,
    )


async def check_search_attributes(client: Client, namespace: str) -> None:
    """Fail fast: a turn started with an unknown search attribute wedges forever."""
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    missing = [k.name for k in SEARCH_ATTRIBUTES if k.name not in response.custom_attributes]
    if missing:
        commands = "\n".join(
            f"  temporal operator search-attribute create --namespace {namespace} --name {n} --type Keyword"
            for n in missing
        )
        raise SystemExit(
            f"namespace {namespace!r} lacks the search attributes {missing}; register them:\n{commands}"
        )


@contextlib.asynccontextmanager
async def embedded_server_if_needed(settings: Settings) -> AsyncIterator[EmbeddedServer | None]:
    if not settings.embedded:
        yield None
        return
    server = EmbeddedServer(
        settings.data_dir, port=settings.embedded_port, ui_port=settings.ui_port
    )
    await server.start()
    log.info("embedded Temporal dev server on %s, UI at %s", server.address, server.ui_url)
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def running_worker(
    client: Client,
    settings: Settings,
    hooks: TurnHooks | None = None,
    tools: ToolRegistry | None = None,
    store: TranscriptStore | None = None,
) -> AsyncIterator[Worker]:
    """A started worker for ``settings.task_queue`` (the store is opened and closed here)."""
    hooks = hooks or load_hooks(settings.hooks)
    session = await call_hook(hooks.configure_session(Session()))
    for module in settings.transforms:
        load_transforms(module)
    store = store or open_store(settings.resolved_store_url)
    streams = open_stream_backend(settings.resolved_chunk_stream_url)
    models = ModelRegistry.for_worker(settings)
    await store.open()
    if streams is not None:
        await streams.open()
    deps = ActivityDeps(
        store, models, tools or load_tools(settings.tools), hooks, settings, session, streams
    )
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=WORKFLOWS,
        activities=all_activities(deps),
        workflow_runner=sandbox_runner(),
        max_concurrent_activities=200,
        # A killed worker's cached workflows wait this long on its sticky queue before
        # another worker takes them (default 10 s); crash recovery should not.
        sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        **worker_options(settings),  # graceful shutdown, heartbeat throttling (activities/deps.py)
    )
    try:
        async with worker:
            yield worker
    finally:
        await models.aclose()
        await store.close()
        if streams is not None:
            await streams.close()


async def serve(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with embedded_server_if_needed(settings) as server:
        client = await connect(settings)
        await check_search_attributes(client, settings.namespace)
        async with running_worker(client, settings):
            where = (
                f"embedded server {server.address} (UI {server.ui_url})"
                if server
                else settings.address
            )
            print(f"worker ready: task queue {settings.task_queue!r} on {where}", flush=True)
            await stop.wait()
    print("worker stopped", flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Run a durable-turns worker.")
    add_worker_arguments(p)
    return p


def add_worker_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tools", action="append", help="module of tools (repeatable; env TURNS_TOOLS)")
    p.add_argument("--hooks", help="module:Class of a TurnHooks subclass (env TURNS_HOOKS)")
    p.add_argument(
        "--transforms", action="append", help="module of stream transforms (env TURNS_TRANSFORMS)"
    )
    p.add_argument("--task-queue", help="task queue (env TURNS_TASK_QUEUE)")
    p.add_argument("--model", help="default provider:model id (env TURNS_MODEL)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    return settings.with_overrides(
        tools=settings.tools + (args.tools or []),
        transforms=settings.transforms + (args.transforms or []),
        hooks=args.hooks,
        task_queue=args.task_queue,
        model=args.model,
    )


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parser().parse_args(argv)
    try:
        asyncio.run(serve(settings_from_args(args)))
    except ValueError as e:
        sys.exit(f"worker: {e}")


if __name__ == "__main__":
    main()
