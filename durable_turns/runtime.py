"""The worker: builds the client, registers the workflows and activities, and runs.

    python worker.py [--tools MODULE] [--hooks MODULE:CLASS] [--task-queue Q]
    turns worker     (the same)

With no ``TEMPORAL_ADDRESS`` it starts the embedded Temporal dev server itself (UI on
:8233, data under ``TURNS_DATA_DIR``) and stops it on exit; with it set, it connects there.

Loading the user's tools, hooks and transforms is ``durable_turns.user_code``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError
from temporalio.worker import Worker

from durable_turns import entry, eventloop
from durable_turns._temporal.interceptors import answerable_bytes, update_bound
from durable_turns._temporal.plugin import DurableTurnsPlugin
from durable_turns.activities.heartbeats import worker_options
from durable_turns.codec import data_converter_from_env
from durable_turns.config import Settings, mask_url
from durable_turns.contract import SEARCH_ATTRIBUTES
from durable_turns.devserver import EmbeddedServer, ServerStartError
from durable_turns.environment_secrets import install_log_redaction
from durable_turns.hooks import TurnHooks
from durable_turns.mcp import McpPool, McpServerConfig
from durable_turns.mcp import servers_from as mcp_servers
from durable_turns.store import TranscriptStore
from durable_turns.tools import ToolRegistry
from durable_turns.transforms import transform_names
from durable_turns.user_code import load_hooks, load_tools, load_user_transforms
from durable_turns.workflows.conversation import ConversationWorkflow
from durable_turns.workflows.turn import TurnWorkflow

log = logging.getLogger("durable_turns.worker")

STICKY_TIMEOUT = timedelta(seconds=2)

HAND_OVER_AFTER_S = 0.02
"""On shutdown, how long after its start the model steps are handed over: the worker has
stopped polling by then, so the turns' next tasks go to the other workers."""

WORKFLOWS = [ConversationWorkflow, TurnWorkflow]


async def connect(settings: Settings) -> Client:
    """The client (and so the worker's runtime), with metrics and tracing when configured."""
    runtime = None
    if settings.prometheus_bind:
        runtime = Runtime(
            telemetry=TelemetryConfig(
                metrics=PrometheusConfig(bind_address=settings.prometheus_bind)
            )
        )
    bound = update_bound()  # no update a worker could not answer is sent
    interceptors: list[Any] = [bound]
    if settings.otel:
        try:
            from temporalio.contrib.opentelemetry import TracingInterceptor
        except ImportError as e:
            raise ValueError(
                "TURNS_OTEL needs the 'otel' extra: pip install 'durable-turns[otel]'"
            ) from e
        interceptors.append(TracingInterceptor())
    client = await Client.connect(
        settings.address,
        namespace=settings.namespace,
        data_converter=data_converter_from_env(),
        interceptors=interceptors,
        runtime=runtime,
    )
    bound.limit = answerable_bytes(await blob_size_limit(client, settings.namespace))
    return client


async def connect_with_retry(
    settings: Settings,
    stop: asyncio.Event | None = None,
    first_delay_s: float = 0.5,
    max_delay_s: float = 15.0,
) -> Client | None:
    """``connect``, retried with exponential backoff while the server is unreachable, each
    retry said in the log: a worker started before its server (or during a restart) waits
    for it instead of exiting. None when ``stop`` was set while waiting."""
    delay = first_delay_s
    while True:
        try:
            client = await connect(settings)
        except RuntimeError as e:  # the SDK's "Failed client connect: …"
            reason = str(e).split("Server connection error:")[-1].strip()
            log.warning(
                "Temporal server at %s unreachable (%s); retrying in %.1fs",
                settings.address,
                reason[:200],
                delay,
            )
        else:
            if delay > first_delay_s:
                log.info("connected to the Temporal server at %s", settings.address)
            return client
        if stop is None:
            await asyncio.sleep(delay)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            if stop.is_set():
                return None
        delay = min(delay * 2, max_delay_s)


async def check_search_attributes(client: Client, namespace: str) -> list[str]:
    """Make sure the namespace knows the search attributes the workflows set (a turn
    started with an unknown one fails). Missing ones are registered through the operator
    service where the server allows it (dev servers, self-hosted clusters); otherwise the
    worker stops and prints the commands that register them. Returns what it registered."""
    missing = await _missing_search_attributes(client, namespace)
    if not missing:
        return []
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={
                    k.name: IndexedValueType.ValueType(k.indexed_value_type.value)
                    for k in SEARCH_ATTRIBUTES
                    if k.name in missing
                },
            )
        )
        for _ in range(100):  # visible to the namespace a moment later
            if not await _missing_search_attributes(client, namespace):
                break
            await asyncio.sleep(0.1)
    except RPCError as e:
        commands = "\n".join(
            f"  temporal operator search-attribute create --namespace {namespace} --name {n} --type Keyword"
            for n in missing
        )
        raise SystemExit(
            f"namespace {namespace!r} lacks the search attributes {missing}, and the server"
            f" did not let this worker register them ({e.message}); register them:\n{commands}"
        ) from None
    print(
        f"registered the search attributes {', '.join(missing)} in namespace {namespace!r}"
        " (they were missing)",
        flush=True,
    )
    return missing


async def _missing_search_attributes(client: Client, namespace: str) -> list[str]:
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    return [k.name for k in SEARCH_ATTRIBUTES if k.name not in response.custom_attributes]


async def blob_size_limit(client: Client, namespace: str) -> int | None:
    """The namespace's blob size limit (``limit.blobSize.error``), None when the server does
    not say: clients refuse updates too large for a worker to answer within it
    (``durable_turns._temporal.interceptors``)."""
    try:
        response = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace)
        )
    except RPCError as e:
        log.warning("could not read namespace %r's limits (%s): assuming 2 MiB", namespace, e)
        return None
    return response.namespace_info.limits.blob_size_limit_error or None


def info_task_queue(task_queue: str) -> str:
    """Where workers of ``task_queue`` say where they keep their data (see ``worker_identity``)."""
    return f"{task_queue}/workers"


def worker_identity(settings: Settings) -> str:
    """``pid@host`` plus where this worker keeps its data (passwords masked).

    Each worker also polls ``info_task_queue`` under this identity (nothing is ever
    scheduled there, so it costs no history), and Temporal shows pollers' identities to
    clients (``DescribeTaskQueue``, the UI's task queue page): ``turns state`` can say where
    the transcripts and the chunk stream of the workers serving a task queue live, even
    when the client runs elsewhere. The turn worker keeps the short default identity, which
    every history event it writes records.
    """
    return (
        f"{os.getpid()}@{socket.gethostname()}"
        f" store={mask_url(settings.resolved_store_url)}"
        f" chunks={mask_url(settings.resolved_chunk_stream_url)}"
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
        # off the event loop: stopping waits for the server process (up to 10 s), and the
        # loop watchdog would report that wait as a blocked loop
        await asyncio.to_thread(server.stop)


@contextlib.asynccontextmanager
async def running_worker(
    client: Client,
    settings: Settings,
    hooks: TurnHooks | None = None,
    tools: ToolRegistry | None = None,
    store: TranscriptStore | None = None,
) -> AsyncIterator[Worker]:
    """A started worker for ``settings.task_queue``: the engine's plugin
    (:class:`DurableTurnsPlugin`, which opens and closes the store) on a worker of its own,
    with the options the engine's activities want."""
    plugin = DurableTurnsPlugin(
        settings,
        hooks=hooks,
        tools=tools,
        store=store,
    )
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        plugins=[plugin],
        max_concurrent_activities=settings.max_concurrent_activities,
        # A killed worker's cached workflows wait this long on its sticky queue before
        # another worker takes them (default 10 s); crash recovery should not.
        sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        **worker_options(settings),  # graceful shutdown, heartbeat throttling (activities/deps.py)
    )
    identity = worker_identity(settings)

    @activity.defn(name="worker_info")
    async def worker_info() -> str:  # never scheduled: the poller's identity is the point
        return identity

    info = Worker(
        client,
        task_queue=info_task_queue(settings.task_queue),
        activities=[worker_info],
        max_concurrent_activities=1,
        identity=identity,
    )
    async with info:
        run = asyncio.create_task(worker.run())
        opened = asyncio.create_task(plugin.opened.wait())
        await asyncio.wait({run, opened}, return_when=asyncio.FIRST_COMPLETED)
        if not opened.done():  # the run ended first: the store or the stream did not open
            opened.cancel()
            await run  # raises what stopped it
            raise RuntimeError("the worker stopped before it opened its store")
        try:
            yield worker
        finally:
            if not run.done():
                # Polling stops first (the shutdown's first move), then the model steps
                # still running here move on to the other workers at once; tool calls get
                # the grace (``TURNS_SHUTDOWN_GRACE_S``) to finish.
                shutdown = asyncio.create_task(worker.shutdown())
                await asyncio.sleep(HAND_OVER_AFTER_S)
                await plugin.hand_over()
                await shutdown
            await run


def ready_lines(
    settings: Settings,
    hooks: TurnHooks,
    tools: ToolRegistry,
    server: EmbeddedServer | None,
    mcp: McpPool | None = None,
) -> list[str]:
    """What a worker serves, said once it is polling: where, which queue, models, tools,
    hooks, transforms, and where its data lives (passwords masked)."""
    where = (
        f"embedded Temporal dev server {server.address} (UI {server.ui_url})"
        if server
        else f"Temporal {settings.address}"
    )
    model = settings.model
    if model.startswith("demo:"):
        model += " (a scripted demo, not an LLM: set TURNS_MODEL or --model)"
    providers = ", ".join(
        f"{name} ({'key set' if os.environ.get(key) else f'no {key}'})"
        for name, key in (("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY"))
    )
    if os.environ.get("OPENAI_BASE_URL"):
        providers += f", openai at {mask_url(os.environ['OPENAI_BASE_URL'])}"
    cls = type(hooks)
    hooks_name = (
        "default (TurnHooks)" if cls is TurnHooks else f"{cls.__module__}:{cls.__qualname__}"
    )
    custom = [n for n in transform_names() if n not in ("uppercase", "redact-emails")]
    demo_dir = (
        f"{settings.demo_dir.resolve()} (TURNS_DEMO_DIR: demo:<name> plays <name>.json there)"
        if settings.demo_dir
        else "(TURNS_DEMO_DIR unset: the built-in demo scripts only)"
    )
    lines = [
        f"worker ready: {where} · namespace {settings.namespace}"
        f" · task queue {settings.task_queue!r}",
        f"  model       {model}; providers demo, {providers}",
        f"  demo dir    {demo_dir}",
        f"  tools       {', '.join(tools.names()) or '(none)'}",
        f"  hooks       {hooks_name}",
        f"  transforms  {', '.join(custom) or '(built-in only)'}",
        f"  store       {mask_url(settings.resolved_store_url)}",
        f"  chunks      {mask_url(settings.resolved_chunk_stream_url)}",
    ]
    if mcp is not None:
        lines += [f"  mcp         {line}" for line in mcp.describe()]
    return lines


@contextlib.asynccontextmanager
async def mcp_pool(
    servers: list[McpServerConfig], tools: ToolRegistry
) -> AsyncIterator[McpPool | None]:
    """The worker's MCP sessions (None without servers), their tools in ``tools``."""
    if not servers:
        yield None
        return
    pool = McpPool(servers, tools)
    await pool.start()
    try:
        yield pool
    finally:
        await pool.aclose()


async def serve(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # the user's modules first: a typo fails in a second, before any server starts
    hooks = load_hooks(settings.hooks)
    tools = load_tools(settings.tools)
    load_user_transforms(settings.transforms)
    servers = mcp_servers(settings.mcp, settings.mcp_config)
    async with embedded_server_if_needed(settings) as server:
        client = await connect_with_retry(settings, stop)
        if client is None:
            print("worker stopped", flush=True)
            return
        await check_search_attributes(client, settings.namespace)
        async with (
            mcp_pool(servers, tools) as mcp,
            running_worker(client, settings, hooks=hooks, tools=tools),
        ):
            print("\n".join(ready_lines(settings, hooks, tools, server, mcp)), flush=True)
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
    p.add_argument(
        "--mcp",
        action="append",
        metavar="NAME=COMMAND_OR_URL",
        help="an MCP server: NAME=COMMAND ARGS… (stdio) or NAME=https://… (repeatable; env"
        " TURNS_MCP, ';'-separated)",
    )
    p.add_argument("--mcp-config", help="a JSON file of MCP servers (env TURNS_MCP_CONFIG)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    return settings.with_overrides(
        tools=settings.tools + (args.tools or []),
        transforms=settings.transforms + (args.transforms or []),
        mcp=settings.mcp + (args.mcp or []),
        mcp_config=args.mcp_config,
        hooks=args.hooks,
        task_queue=args.task_queue,
        model=args.model,
    )


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    install_log_redaction()  # no log record carries a secret, or any run of 12 of its characters
    args = parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
        eventloop.run(serve(settings), settings.loop_coalesce_ms)
    except (ValueError, ServerStartError) as e:  # ServerStartError: e.g. a port in use
        sys.exit(f"worker: {e}")
    finally:
        # The interpreter's teardown would walk every object the worker made in its garbage
        # collections (~0.1 s of a stop spent after "worker stopped"); frozen, the exit is
        # immediate. Objects still freed and finalized as their references go; atexit runs.
        gc.freeze()


if __name__ == "__main__":
    entry.call(main)  # no interpreter teardown: temporalio can abort it (sdk-python#300)
