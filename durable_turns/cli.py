"""The ``turns`` command line.

turns demo                          run the offline demo end to end, then clean up
turns worker [--tools M] [--hooks M:C]   run a worker (embedded server if no TEMPORAL_ADDRESS)
turns server                        run only the embedded Temporal dev server
turns chat CONV "message" [--model ID]   run a turn and print the reply
turns continue CONV                 continue the last assistant message
turns regenerate CONV [--message ID] regenerate the last reply (or the one named) and print it
turns cancel CONV [--request ID]    cancel a queued request or the running turn
turns state CONV                    the conversation's state as JSON
turns transcript CONV               the stored messages (superseded ones marked)
turns serve [--host H] [--port P]   the browser front door and its chat page

Why it is long (about 800 lines): one short function per command above, with the argument
parsers and the printing they share; the worker's own start-up lives in ``runtime``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.metadata
import json
import math
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from durable_turns.client import STATE_TASK_WAIT_S, TurnsClient
from durable_turns.config import Settings, mask_url
from durable_turns.contract import (
    REGENERATE_LAST,
    ConversationState,
    RequestRecord,
    TurnResult,
    id_problem,
    metadata_problem,
    regenerate_problem,
)
from durable_turns.devserver import EmbeddedServer, ServerStartError, port_free, port_open
from durable_turns.entry import exit_status, leave
from durable_turns.errors import DurableTurnsError, NoWorker
from durable_turns.presence import pollers


def _print_result(result: TurnResult) -> None:
    if result.text:
        print(result.text)
    line = f"[turn {result.turn_number} · {result.status} · {result.steps} step(s) · {result.workflow_id}]"
    if result.error:
        line += f"\nerror ({result.error.type}): {result.error.message}"
    print(line, file=sys.stderr if result.status != "completed" else sys.stdout)


def fail(message: str) -> int:
    """One line on stderr, no traceback: what went wrong and what to do."""
    print(f"turns: {message}", file=sys.stderr, flush=True)
    return 1


class InvalidInput(DurableTurnsError):
    """A mistake in what the user typed: one line, exit status 2, nothing sent or retried."""


def parse_body(
    text: str | None, flag: str = "--body", example: str = '{"mode": "browse"}'
) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidInput(
            f"{flag} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno});"
            f" e.g. {flag} '{example}'"
        ) from None
    if not isinstance(body, dict):
        raise InvalidInput(f"{flag} must be a JSON object, got {type(body).__name__}")
    return body


def parse_metadata(text: str | None) -> dict[str, Any] | None:
    """``--metadata``: the turn's metadata, a JSON object within ``MAX_METADATA_BYTES``."""
    metadata = parse_body(text, "--metadata", '{"user": "u-42"}')
    if metadata is not None and (problem := metadata_problem(metadata)):
        raise InvalidInput(f"--metadata: {problem}")
    return metadata


def check_model(model: str | None) -> None:
    """A ``provider:model`` id; a ``demo:`` script file found here is checked before it is
    sent, so a broken one is one line naming the file, not a failed turn."""
    if model is None:
        return
    provider, sep, name = model.partition(":")
    if not sep or not provider or not name:
        raise InvalidInput(
            f"--model {model!r} is not a provider:model id"
            " (e.g. anthropic:claude-sonnet-4-5, openai:gpt-4.1, demo:weather)"
        )
    if provider != "demo":
        return
    from durable_turns.models.demo import BUILTIN_SCRIPTS, DemoProvider

    if name in BUILTIN_SCRIPTS:
        return
    path = DemoProvider().script_path(name)  # where a worker with this TURNS_DEMO_DIR looks
    if path is None:
        return  # a file only the worker sees (its TURNS_DEMO_DIR): the worker checks it
    problem = demo_script_problem(path.read_text(errors="replace"))
    if problem:
        raise InvalidInput(f"--model {model}: demo script {path} {problem}")


def demo_script_problem(text: str) -> str | None:
    """What is wrong with a demo script's text (see docs/tools.md), or None."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return f"is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
    if isinstance(data, dict) and "turns" in data:
        turns = data["turns"]
        if not isinstance(turns, list) or not all(isinstance(t, list) for t in turns):
            return 'has "turns" that is not a list of lists of steps'
        steps = [s for t in turns for s in t]
    elif isinstance(data, dict) and "steps" in data:
        steps = data["steps"]
    else:
        steps = data
    if not isinstance(steps, list):
        return 'is neither a list of steps nor {"steps": [...]} nor {"turns": [[...]]}'
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            return f"has step {i} that is not a JSON object"
    return None


async def _client(settings: Settings) -> TurnsClient:
    if settings.embedded and not port_open("127.0.0.1", settings.embedded_port):
        sys.exit(
            f"turns: no Temporal server at {settings.address}: start a worker first"
            " (`turns worker`), or set TEMPORAL_ADDRESS"
        )
    try:
        return await TurnsClient.connect(settings)
    except RuntimeError as e:  # the SDK's connection error
        sys.exit(f"turns: cannot connect to the Temporal server at {settings.address}: {e}")


async def _pollers(
    client: TurnsClient, task_queue: str, kind: TaskQueueType.ValueType
) -> list[str]:
    """The workers that polled ``task_queue`` recently (``presence.POLLER_FRESH_S``): the
    server keeps listing a gone worker's poller for minutes."""
    return await pollers(client.client, task_queue, kind)


async def workers(client: TurnsClient) -> list[str]:
    """The workers serving the client's task queue (polled recently), each as its identity
    with where it keeps its data (``runtime.worker_identity``); empty when none polls."""
    from durable_turns.runtime import info_task_queue

    if not await _pollers(client, client.task_queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW):
        return []
    described = await _pollers(
        client, info_task_queue(client.task_queue), TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
    )
    return described or ["a worker (where it keeps its data: not reported)"]


def _worker_field(identity: str, name: str) -> str | None:
    for word in identity.split():
        if word.startswith(f"{name}="):
            return word.partition("=")[2]
    return None


def _where_workers_keep(identities: list[str], name: str) -> str:
    found = sorted({w for i in identities if (w := _worker_field(i, name))})
    return ", ".join(found) if found else "(unknown: the workers did not say)"


async def chat(args: argparse.Namespace, settings: Settings) -> int:
    """Submit the message, print the reply live from the chunk stream, then its status.

    Never waits on the stream alone: the turn's result decides when the command ends, and a
    turn that finished with no live chunks where this client looks is reported, with the
    place the workers keep their stream, and its reply printed from the result.
    """
    if not args.message.strip():
        raise InvalidInput(
            f"the message is {'empty' if not args.message else 'only whitespace'}: a turn"
            f" needs something to answer (e.g. turns chat {shlex.quote(args.conversation)}"
            " 'Weather in Paris?')"
        )
    body = parse_body(args.body)
    metadata = parse_metadata(args.metadata)
    check_model(args.model)
    return await _run_turn(
        settings,
        args.conversation,
        lambda client: client.start(
            args.conversation, args.message, model=args.model, body=body, metadata=metadata
        ),
    )


async def regenerate(args: argparse.Namespace, settings: Settings) -> int:
    """Regenerate the last reply (or ``--message ID``), printing the new one live as chat."""
    body = parse_body(args.body)
    metadata = parse_metadata(args.metadata)
    check_model(args.model)
    if problem := regenerate_problem(args.message):
        raise InvalidInput(f"--message {args.message!r}: {problem}")
    return await _run_turn(
        settings,
        args.conversation,
        lambda client: client.start_regenerate(
            args.conversation, args.message, model=args.model, body=body, metadata=metadata
        ),
        existing=True,
    )


async def _run_turn(
    settings: Settings,
    conversation: str,
    start: Callable[[TurnsClient], Awaitable[RequestRecord]],
    existing: bool = False,
) -> int:
    """Start a turn (``start``), print its reply live, then its status (see :func:`chat`).
    ``existing``: only in a conversation that exists (a typo creates nothing)."""
    client = await _client(settings)
    try:
        if existing and not await client.exists(conversation):
            return fail(_no_conversation(conversation, settings))
        polling = await workers(client)
        if not polling:
            return fail(
                f"no worker polls task queue {client.task_queue!r} on {settings.address}:"
                " start one with `turns worker` (or check TURNS_TASK_QUEUE)"
            )
        try:
            started = await start(client)
        except WorkflowUpdateFailedError as e:
            return fail(_rejection(e))
        number = started.turn_number
        live: asyncio.Task[None] | None = None
        seen = [0]  # events the live printer has shown
        if number and client.stream_url not in ("none", "off"):
            live = asyncio.create_task(_print_live(client, conversation, number, seen))
        result = await client.result(conversation, started)
        await _finish_live(live)
        streamed = seen[0] > 0
        if streamed:
            _print_result(result.model_copy(update={"text": ""}))
            return 0 if result.status == "completed" else 1
        _print_result(result)
        if live is None:
            return 0 if result.status == "completed" else 1
        return fail(
            f"turn {number} finished, but its live chunk stream was not found at"
            f" {mask_url(client.stream_url)} (the reply above is from the turn's result);"
            f" the workers of task queue {client.task_queue!r} keep theirs at"
            f" {_where_workers_keep(polling, 'chunks')}: set TURNS_DATA_DIR or"
            " TURNS_CHUNK_STREAM_URL to match"
        )
    finally:
        await client.aclose()


async def _finish_live(live: asyncio.Task[None] | None, grace_s: float = 2.0) -> None:
    """Once the turn has finished: give the live printer a moment to reach ``turn-finish``,
    then stop it. An unreadable stream counts as none found (the result is printed)."""
    if live is None:
        return
    done, _ = await asyncio.wait({live}, timeout=grace_s)
    if not done:
        live.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await live


async def _print_live(client: Any, conversation: str, number: int, seen: list[int]) -> None:
    out = sys.stdout
    async for event in client.chunks(conversation, number):
        seen[0] += 1
        if event.type == "chunk" and event.data.get("type") == "text-delta":
            out.write(event.data["text"])
            out.flush()
        elif event.type == "chunk" and event.data.get("type") == "tool-call":
            out.write(
                f"\n  → {event.data['tool_name']}({json.dumps(event.data['input'], ensure_ascii=False)})\n"
            )
        elif event.type == "tool-result":
            out.write(f"  ← {json.dumps(event.data.get('output'), ensure_ascii=False)}\n")
        elif event.type == "recovering":
            what = event.data.get("tool_name") or event.data.get("stage", "turn")
            out.write(
                f"\n[recovering ({event.data.get('reason', 'lost attempt')}):"
                f" {what}, attempt {event.data.get('attempt', '?')}]\n"
            )
        elif event.type == "reset":
            out.write("\n[the model step is being retried; its partial output above is replaced]\n")
        elif event.type == "step-start" and event.step:
            out.write("\n")
    out.write("\n")


def _rejection(error: WorkflowUpdateFailedError) -> str:
    """An update the conversation refused (its validator, or the handler), in one line."""
    cause = error.cause
    kind = getattr(cause, "type", None) or type(cause).__name__
    message = getattr(cause, "message", None) or str(cause)
    return f"the conversation rejected the request ({kind}): {message}"


def _no_conversation(conversation: str, settings: Settings) -> str:
    return (
        f"no conversation {conversation!r} on {settings.address} (task queue"
        f" {settings.task_queue!r}): `turns chat {conversation} MESSAGE` starts one"
    )


async def continue_turn(args: argparse.Namespace, settings: Settings) -> int:
    """``continueLastTurn`` (signal-with-start), then its turn's result. A signal has no
    answer: a request the conversation rejects is found in ``state`` and said here. Only in
    a conversation that exists: a typo creates nothing."""
    client = await _client(settings)
    if not await client.exists(args.conversation):
        return fail(_no_conversation(args.conversation, settings))
    if not await workers(client):
        return fail(
            f"no worker polls task queue {client.task_queue!r} on {settings.address}:"
            " start one with `turns worker` (or check TURNS_TASK_QUEUE)"
        )
    request_id = await client.continue_last_turn(args.conversation)
    result = await client.wait(args.conversation, request_id)
    if result.turn_number == 0 and result.status == "error" and result.error is not None:
        return fail(
            f"the conversation rejected the request {request_id} ({result.error.type}):"
            f" {result.error.message}"
        )
    _print_result(result)
    return 0 if result.status in ("completed", "skipped") else 1


CANCEL_WAIT_S = 15.0
"""How long ``turns cancel`` watches the request it cancelled end, before saying it is
still stopping."""


def _find(current: ConversationState, request_id: str) -> RequestRecord | None:
    records = [*([current.running] if current.running else []), *current.queue, *current.recent]
    return next((r for r in records if r.request_id == request_id), None)


def _describe_request(record: RequestRecord) -> str:
    if record.turn_number:
        return f"turn {record.turn_number} (request {record.request_id})"
    return f"request {record.request_id}"


async def cancel(args: argparse.Namespace, settings: Settings) -> int:
    """Cancel the running turn, or one request, and say what was (or was not) cancelled:
    the conversation's ``state`` before says what there is to cancel, and after, how the
    request ended. Nothing to cancel is one line and exit status 1; nothing is sent then."""
    client = await _client(settings)
    conversation = args.conversation
    try:
        described = await client.conversation(conversation).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return fail(f"no conversation {conversation!r} on {settings.address}")
        raise
    if described.status != WorkflowExecutionStatus.RUNNING:
        status = described.status.name.lower() if described.status else "closed"
        return fail(f"nothing to cancel: conversation {conversation!r} is {status}")
    queue = described.task_queue
    if not await _pollers(client, queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW):
        # Nothing can answer the state query (it would wait ~30 s for a worker, then fail):
        # the signal waits for a worker, and so does what it cancels.
        await client.cancel(conversation, args.request)
        what = (
            f"request {args.request!r} if it is still queued or running"
            if args.request
            else "its running turn, if there is one"
        )
        print(
            f"cancel sent, not yet seen: no worker polls task queue {queue!r} right now; once"
            f" one does, the conversation cancels {what} (`turns state {conversation}` then"
            " says how it ended)"
        )
        return 0
    before = await client.state(conversation)
    if args.request is None:
        record = before.running
        if record is None:
            waiting = (
                f"; {before.queued_count} request(s) queued: cancel one with --request ID"
                f" ({', '.join(r.request_id for r in before.queue[:3])}"
                f"{', …' if before.queued_count > 3 else ''})"
                if before.queued_count
                else ""
            )
            return fail(
                f"nothing to cancel: conversation {conversation!r} has no running turn{waiting}"
            )
    else:
        record = _find(before, args.request)
        if record is None:
            return fail(
                f"nothing to cancel: conversation {conversation!r} has no request"
                f" {args.request!r} (neither queued, running nor among its recent ones)"
            )
        if record.status not in ("queued", "running"):
            return fail(
                f"nothing to cancel: {_describe_request(record)} already ended ({record.status})"
            )
    was = record.status
    await client.cancel(conversation, args.request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CANCEL_WAIT_S
    while True:
        now = _find(await client.state(conversation), record.request_id) or record
        if now.status not in ("queued", "running"):
            break
        if loop.time() > deadline:
            print(
                f"cancel sent to {_describe_request(now)}; after {CANCEL_WAIT_S:g}s it is still"
                " stopping (a model step stops at its next heartbeat, a tool when it returns):"
                f" `turns state {conversation}` shows when it ends"
            )
            return 0
        await asyncio.sleep(0.1)
    if now.status == "aborted":
        if now.turn_number:
            print(f"cancelled {_describe_request(now)}: it ended aborted")
        else:
            print(f"cancelled queued {_describe_request(now)}: it will not run")
        return 0
    return fail(
        f"nothing cancelled: {_describe_request(now)} ended {now.status}"
        f" before the cancel reached it (it was {was})"
    )


async def state(args: argparse.Namespace, settings: Settings) -> int:
    """The conversation's state as JSON (stdout), then (stderr, so the JSON stays pipeable)
    whether its task waits (``queued: …`` for a worker's activity slot), and where its
    workers keep their data."""
    client = await _client(settings)
    conversation = args.conversation
    try:
        described = await client.conversation(conversation).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return fail(_no_conversation(conversation, settings))
        raise
    status = (described.status or WorkflowExecutionStatus.RUNNING).name.lower()
    no_worker = (
        f"waiting for a worker: no worker polls task queue {described.task_queue!r} on"
        f" {settings.address}, and a conversation's state is answered by its worker: start one"
        f" with `turns worker` (conversation {conversation!r} is {status})"
    )
    if not await _pollers(client, described.task_queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW):
        return fail(no_worker)  # the query would wait for one
    try:  # a worker gone meanwhile, or a task unstarted: said in seconds (``TurnsClient.state``)
        current = await client.state(conversation)
    except NoWorker as e:
        return fail(f"{e} (conversation {conversation!r} is {status})")
    except RPCError as e:
        if e.status == RPCStatusCode.DEADLINE_EXCEEDED:  # the worker went away meanwhile
            return fail(no_worker)
        return fail(f"cannot query conversation {conversation!r}: {e.message}")
    print(current.model_dump_json(indent=2))
    rejected = [r for r in current.recent if r.status == "rejected" and r.error is not None]
    if current.rejected_count and rejected:
        latest, error = rejected[-1], rejected[-1].error
        assert error is not None
        print(
            f"# {current.rejected_count} request(s) rejected; the latest, {latest.request_id}"
            f" ({error.type}): {error.message}",
            file=sys.stderr,
        )
    running = current.running.turn_number if current.running else None
    said = await client.waiting_for_worker(conversation, running, wait_s=STATE_TASK_WAIT_S)
    if said:  # ``queued: …`` (every activity slot busy), or a task no worker took
        print(f"# {said}", file=sys.stderr)
    polling = await workers(client)
    if not polling:
        print(f"# no worker polls task queue {client.task_queue!r} right now", file=sys.stderr)
    for identity in polling:
        name, _, rest = identity.partition(" ")
        where = " · ".join(
            f"{label} {_worker_field(identity, key) or '?'}"
            for key, label in (("store", "transcripts"), ("chunks", "chunk stream"))
        )
        print(
            f"# worker {name} on task queue {client.task_queue!r}: "
            + (where if rest else "(where it keeps its data: not reported)"),
            file=sys.stderr,
        )
    return 0


async def transcript(args: argparse.Namespace, settings: Settings) -> int:
    from durable_turns.store import open_store
    from durable_turns.store.base import SUPERSEDED_BY

    async with open_store(settings.resolved_store_url) as store:
        messages = await store.messages(args.conversation, superseded=True)
        if not messages:
            where = await _workers_store(settings)
            return fail(
                f"no messages of conversation {args.conversation!r} in"
                f" {mask_url(settings.resolved_store_url)}{where}"
            )
        for message in messages:
            if args.json:
                print(message.model_dump_json())
                continue
            by = message.metadata.get(SUPERSEDED_BY)
            mark = f" · superseded by {by}" if by else ""
            print(f"--- {message.role} ({message.id}){mark}")
            for part in message.parts:
                print(_describe(part.model_dump()))
    return 0


async def _workers_store(settings: Settings) -> str:
    """``; the workers … keep theirs at …`` when a server and workers answer, else ``""``."""
    if settings.embedded and not port_open("127.0.0.1", settings.embedded_port):
        return ""
    try:
        client = await asyncio.wait_for(TurnsClient.connect(settings), 5)
        polling = await asyncio.wait_for(workers(client), 5)
    except Exception:
        return ""
    if not polling:
        return ""
    return (
        f"; the workers of task queue {settings.task_queue!r} keep theirs at"
        f" {_where_workers_keep(polling, 'store')} (set TURNS_DATA_DIR or TURNS_STORE_URL)"
    )


def _describe(part: dict[str, Any]) -> str:
    kind = part["type"]
    if kind == "text":
        return str(part["text"])
    if kind == "reasoning":
        return f"  (reasoning) {part['text']}"
    if kind == "tool-call":
        return f"  → {part['tool_name']}({json.dumps(part['input'], ensure_ascii=False)}) [{part['tool_call_id']}]"
    if kind == "tool-result":
        flag = " (error)" if part["is_error"] else ""
        return f"  ← {part['tool_name']}{flag}: {json.dumps(part['output'], ensure_ascii=False)}"
    if kind == "step-start":
        return "  · step"
    return f"  ({kind})"


async def server(args: argparse.Namespace, settings: Settings) -> int:
    """The embedded dev server alone, until Ctrl-C or SIGTERM (then stopped); a SIGKILL of
    this process ends it too (``devserver._end_with_parent``). Workers and the other
    commands started without ``TEMPORAL_ADDRESS`` use it."""
    srv = EmbeddedServer(settings.data_dir, port=settings.embedded_port, ui_port=settings.ui_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await srv.start()
    if srv.shared:
        return fail(
            f"a Temporal server already runs on {srv.address} (another `turns server`, or a"
            " `turns worker` started it): workers and commands use it as it is; set"
            " TURNS_EMBEDDED_PORT and TURNS_UI_PORT to start another beside it"
        )
    try:
        print(
            f"Temporal dev server on {srv.address}; UI at {srv.ui_url}. Ctrl-C stops it.",
            flush=True,
        )
        await stop.wait()
    finally:
        await asyncio.to_thread(srv.stop)
    print("Temporal dev server stopped.", flush=True)
    return 0


LOOPBACK = ("127.0.0.1", "::1", "localhost")


async def serve(args: argparse.Namespace, settings: Settings) -> int:
    """The browser front door (``durable_turns.web``) under uvicorn."""
    try:
        import uvicorn

        from durable_turns.web import create_app
    except ImportError:
        return fail("turns serve needs the web extra: pip install 'durable-turns[web]'")
    if args.host not in LOOPBACK and not settings.http_token and not args.auth:
        return fail(
            f"refusing to serve on {args.host} without authentication: set TURNS_HTTP_TOKEN"
            " (or --auth module:function), or bind to 127.0.0.1"
        )
    authenticate = _load_callable(args.auth) if args.auth else None
    if not port_free(args.host, args.port):
        return fail(f"port {args.port} on {args.host} is in use (choose another with --port)")
    app = create_app(settings, authenticate=authenticate)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=math.ceil(settings.http_shutdown_grace_s),
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started and not serving.done():  # noqa: ASYNC110 (uvicorn has no event)
        await asyncio.sleep(0.02)
    if server.started:  # only once it listens
        print(
            f"front door on http://{args.host}:{args.port}/ (chat page; API under /api/chat)",
            flush=True,
        )
    draining = asyncio.create_task(_drain_on_exit(server, app))
    try:
        await serving
    finally:
        draining.cancel()
    return 0 if server.started else 1


async def _drain_on_exit(server: Any, app: Any) -> None:
    """Once uvicorn is told to stop (SIGTERM, Ctrl-C), end every open stream at once with
    ``data-resume`` (the browser resumes the reply elsewhere): uvicorn waits for open
    responses, and a reply's stream would hold it for the reply's whole length. Requests
    still in flight get ``TURNS_HTTP_SHUTDOWN_GRACE_S`` (uvicorn's graceful timeout)."""
    while not server.should_exit:  # noqa: ASYNC110 (uvicorn sets a flag, no event)
        await asyncio.sleep(0.05)
    await app.state.drain()


def _load_callable(spec: str) -> Any:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise InvalidInput(f"--auth {spec!r}: give module:function")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise InvalidInput(f"--auth {spec!r}: {e}") from None


async def demo(args: argparse.Namespace, settings: Settings) -> int:
    from durable_turns.demo import run_demo

    return await run_demo(settings, keep=args.keep)


def parser() -> argparse.ArgumentParser:
    """The ``turns`` command's parser."""
    return parsers()[0]


def parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The ``turns`` parser and each subcommand's (for a mistake's usage line)."""
    from durable_turns import runtime

    p = argparse.ArgumentParser(
        prog="turns", description="durable-turns: every chat turn a Temporal workflow"
    )
    version = importlib.metadata.version("durable-turns")
    p.add_argument("--version", action="version", version=f"%(prog)s {version}")
    sub = p.add_subparsers(dest="command", required=True)

    w = sub.add_parser("worker", help="run a worker")
    runtime.add_worker_arguments(w)
    sub.add_parser("server", help="run only the embedded Temporal dev server")
    d = sub.add_parser("demo", help="run the offline demo end to end")
    d.add_argument("--keep", action="store_true", help="keep the server and UI up until Ctrl-C")

    c = sub.add_parser("chat", help="run a turn and print the reply")
    c.add_argument("conversation")
    c.add_argument("message")
    c.add_argument("--model", help="provider:model id for this turn")
    c.add_argument("--body", help="JSON object passed to the hooks as TurnContext.body")
    c.add_argument("--metadata", help="JSON object: the turn's metadata (at most 16 KiB)")
    k = sub.add_parser("continue", help="continue the last assistant message")
    k.add_argument("conversation")
    r = sub.add_parser("regenerate", help="regenerate a reply and print the new one")
    r.add_argument("conversation")
    r.add_argument(
        "--message",
        default=REGENERATE_LAST,
        help="the stored id of the assistant message (default: last, the last reply)",
    )
    r.add_argument("--model", help="provider:model id (default: the last request's)")
    r.add_argument("--body", help="JSON object for the hooks (default: the last request's)")
    r.add_argument("--metadata", help="the turn's metadata (default: the last request's)")
    x = sub.add_parser("cancel", help="cancel a request or the running turn")
    x.add_argument("conversation")
    x.add_argument("--request", help="request id (default: the running turn)")
    s = sub.add_parser("state", help="show a conversation's state")
    s.add_argument("conversation")
    v = sub.add_parser("serve", help="run the browser front door (AI SDK chat protocol)")
    v.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    v.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    v.add_argument("--auth", help="module:function authenticating requests (headers → principal)")
    t = sub.add_parser("transcript", help="show a conversation's stored messages")
    t.add_argument("conversation")
    t.add_argument("--json", action="store_true", help="one JSON message per line")
    return p, dict(sub.choices)


COMMANDS = {
    "chat": chat,
    "continue": continue_turn,
    "regenerate": regenerate,
    "cancel": cancel,
    "state": state,
    "transcript": transcript,
    "server": server,
    "serve": serve,
    "demo": demo,
}


def main(argv: list[str] | None = None) -> None:
    from durable_turns.environment_secrets import install_log_redaction

    install_log_redaction()  # before anything logs: every command's records, uvicorn's too
    top, subcommands = parsers()
    args, unknown = top.parse_known_args(argv)
    if unknown:  # said with the usage of the (sub)command they follow
        words = sys.argv[1:] if argv is None else argv
        after = words[words.index(args.command) + 1 :]
        usage = subcommands[args.command] if all(u in after for u in unknown) else top
        usage.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "worker":
        from durable_turns import runtime

        try:
            runtime.main(argv[1:] if argv else sys.argv[2:])
            code = 0
        except SystemExit as e:  # "worker: …" (a port in use, a bad setting): said here
            code = exit_status(e.code)
        if argv is not None:
            sys.exit(code)
        leave(code)  # the worker used a Temporal client: no interpreter teardown (entry.py)
    conversation = getattr(args, "conversation", None)
    if conversation is not None and (problem := id_problem(conversation)):
        top.exit(2, f"turns {args.command}: invalid conversation id: {problem}\n")
    try:
        settings = Settings.from_env()
        code = asyncio.run(COMMANDS[args.command](args, settings))
    except InvalidInput as e:
        print(f"turns {args.command}: {e}", file=sys.stderr)
        code = 2
    except ValueError as e:  # a bad setting (TURNS_*), said by config
        print(f"turns {args.command}: {e}", file=sys.stderr)
        code = 2
    except RPCError as e:
        print(f"turns {args.command}: the Temporal server said: {e.message}", file=sys.stderr)
        code = 1
    except ServerStartError as e:  # a port in use, or the embedded server failed to start
        print(f"turns {args.command}: {e}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    if argv is not None:  # called from Python: leave the interpreter to its caller
        sys.exit(code)
    leave(code)  # no interpreter teardown: temporalio can abort it (sdk-python#300, entry.py)


if __name__ == "__main__":
    main()
