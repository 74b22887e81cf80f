"""``turns demo``: the whole engine on the embedded default, offline, in one command.

It starts an embedded Temporal dev server (UI on :8233) and a worker, runs a conversation
whose turn calls a tool and answers, prints the conversation and where to look at it, and
stops everything again (or keeps it up with ``--keep``, until Ctrl-C, with the chat page
beside it). With ``--keep`` and no model configured its worker runs ``demo:weather-paced``
(:data:`~durable_turns.models.demo.PACED_MODEL`): the same script at reading pace, worded
differently at each turn, so a person on the chat page sees a reply stream, can stop it,
reload it mid-reply and regenerate it (the demo's own two turns take a few seconds more). With
``TEMPORAL_ADDRESS``, or a Temporal server already on the embedded port (another ``turns
worker`` started it), it uses that server and leaves it running. It always ends: a turn it
waits for is named every 15 s, and given up after 120 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import signal
import sys
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from durable_turns.config import EMBEDDED_HOST, Settings
from durable_turns.contract import DEFAULT_MODEL, TurnResult, turn_workflow_id
from durable_turns.devserver import ServerStartError, http_answers, port_open, temporal_answers
from durable_turns.errors import DemoError
from durable_turns.messages import TextPart, ToolCallPart, ToolResultPart
from durable_turns.models.demo import PACED_MODEL
from durable_turns.store import open_store

if TYPE_CHECKING:
    from temporalio.client import Client

    from durable_turns.client import TurnsClient

QUESTIONS = ["What's the weather in Paris?", "And in Tokyo?"]

FRONT_DOOR_PORTS = range(8000, 8010)

TURN_NOTICE_S = 15.0
"""After this long without a turn's result, the demo says what it waits for (again each time)."""

TURN_TIMEOUT_S = 120.0
"""And after this long it gives up, in one line, with exit status 1."""


async def run_demo(settings: Settings, keep: bool = False) -> int:
    """The demo; it always ends: at once without ``keep``, at Ctrl-C (or SIGTERM) with it."""
    try:
        return await _run_demo(settings, keep)
    except (DemoError, ServerStartError) as e:
        print(f"turns demo: {e}", file=sys.stderr, flush=True)
        return 1


async def _run_demo(settings: Settings, keep: bool) -> int:
    from durable_turns import runtime
    from durable_turns.client import TurnsClient

    settings = await _choose_server(
        settings.with_overrides(task_queue=f"{settings.task_queue}-demo")
    )
    if keep and settings.model == DEFAULT_MODEL:  # a person will watch: at reading pace
        settings = settings.with_overrides(model=PACED_MODEL)
    conversation = f"demo-{uuid.uuid4().hex[:8]}"
    async with runtime.embedded_server_if_needed(settings) as server:
        client = await _connect(settings)
        await runtime.check_search_attributes(client, settings.namespace)
        async with runtime.running_worker(client, settings):
            turns = TurnsClient(client, settings.task_queue)
            pace = " at reading pace, for the chat page" if settings.model == PACED_MODEL else ""
            print(
                f"conversation {conversation}  (model {settings.model}: a scripted demo, not"
                f" an LLM{pace})\n"
            )
            store = open_store(settings.resolved_store_url)
            await store.open()
            for number, question in enumerate(QUESTIONS, 1):
                print(f"user      > {question}", flush=True)
                result = await _turn(turns, settings, conversation, number, question)
                reply = (await store.messages(conversation))[-1]
                for part in reply.parts:
                    if isinstance(part, TextPart) and part.text.strip():
                        print(f"assistant > {part.text.strip()}")
                    elif isinstance(part, ToolCallPart):
                        print(
                            f"  tool    → {part.tool_name}({json.dumps(part.input, ensure_ascii=False)})"
                        )
                    elif isinstance(part, ToolResultPart):
                        print(f"  tool    ← {json.dumps(part.output, ensure_ascii=False)}")
                print(
                    f"            [{result.status} · {result.steps} steps · workflow {result.workflow_id}]\n"
                )
            await store.close()
            print("workflows:")
            print(f"  ConversationWorkflow  {conversation}")
            for n in range(1, len(QUESTIONS) + 1):
                print(f"  TurnWorkflow          {turn_workflow_id(conversation, n)}")
            print(f"transcript:  turns transcript {conversation}")
            ui = server.ui_url if server else await asyncio.to_thread(find_ui, settings)
            query = f"ConversationId%3D%22{conversation}%22"
            link = f"{ui}/namespaces/{settings.namespace}/workflows?query={query}" if ui else None
            if link is None:
                print(
                    f"\nTemporal UI: none found for the server at {settings.address} (no UI"
                    f" answers at {_guessed_ui(settings)}; set TURNS_UI_URL to your UI's"
                    " address for a link); in your UI, filter the workflows by"
                    f' ConversationId="{conversation}"'
                )
            elif keep or server is None:
                print(f"\nTemporal UI: {link}")
            else:
                print(
                    "\nTemporal UI: the demo stops its server as it ends, and the UI with it;"
                    f" run `turns demo --keep` to read these turns at\n  {link}"
                )
            if keep:
                page = await _front_door(settings, conversation)
                print(
                    f"Chat page:   {page}"
                    if page
                    else "Chat page:   none (pip install 'durable-turns[web]', or free a port"
                    f" from {FRONT_DOOR_PORTS.start} to {FRONT_DOOR_PORTS.stop - 1})"
                )
                if server is not None:
                    print(
                        "server, UI, chat page and the demo's worker keep running;"
                        " Ctrl-C stops them."
                    )
                else:
                    print(
                        f"the demo's worker keeps serving task queue {settings.task_queue!r}"
                        f" on {settings.address}; Ctrl-C stops it (the server is not the"
                        " demo's and keeps running).",
                    )
                sys.stdout.flush()
                try:
                    await _until_stopped()
                finally:
                    await _stop_front_doors()
    if keep:
        print("stopped.")
    elif server is not None:
        print("demo finished; nothing left running.")
    else:
        print(
            f"demo finished; its worker stopped. The Temporal server at {settings.address} is"
            " not the demo's: it keeps running, with the demo's workflows."
        )
    return 0


async def _choose_server(settings: Settings) -> Settings:
    """``TEMPORAL_ADDRESS``'s server; else a Temporal server already on the embedded port
    (another ``turns worker`` or ``turns server`` started it), used as it is; else the
    embedded server the demo starts. A port taken by anything else is a ``ServerStartError``."""
    if not settings.embedded:
        print(f"using the Temporal server at {settings.address} (TEMPORAL_ADDRESS)")
        return settings
    if not port_open(EMBEDDED_HOST, settings.embedded_port):
        return settings
    address = settings.address
    if not await temporal_answers(address):
        raise ServerStartError(
            f"{address} is in use, and not by a Temporal server: stop what listens there,"
            " or set TURNS_EMBEDDED_PORT to a free port (or TEMPORAL_ADDRESS to your server)"
        )
    print(
        f"using the Temporal server already running on {address} (another `turns worker`"
        " or `turns server` started it?); the demo leaves it running"
    )
    return settings.with_overrides(temporal_address=address)


async def _connect(settings: Settings) -> Client:
    from durable_turns import runtime

    try:
        return await runtime.connect(settings)
    except RuntimeError as e:  # the SDK's "Failed client connect: …"
        reason = str(e).split("Server connection error:")[-1].strip()
        raise DemoError(
            f"cannot connect to the Temporal server at {settings.address}: {reason[:200]}"
        ) from None


async def _turn(
    turns: TurnsClient, settings: Settings, conversation: str, number: int, question: str
) -> TurnResult:
    """One turn's result; while it is awaited, every TURN_NOTICE_S, what the demo waits for,
    and past TURN_TIMEOUT_S a ``DemoError``."""
    task = asyncio.ensure_future(turns.send(conversation, question))
    waited = 0.0
    while True:
        done, _ = await asyncio.wait({task}, timeout=TURN_NOTICE_S)
        if done:
            return task.result()
        waited += TURN_NOTICE_S
        what = (
            f"turn {number}'s result (workflow {turn_workflow_id(conversation, number)}, run by"
            f" the demo's worker on task queue {settings.task_queue!r} at {settings.address})"
        )
        if waited >= TURN_TIMEOUT_S:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise DemoError(f"gave up waiting for {what} after {waited:g}s")
        print(
            f"  … waiting for {what}: {waited:g}s so far, giving up at {TURN_TIMEOUT_S:g}s",
            flush=True,
        )


async def _until_stopped() -> None:
    """Until Ctrl-C or SIGTERM (then the demo stops what it started and exits 0)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


def _guessed_ui(settings: Settings) -> str:
    host = settings.address.rpartition(":")[0] or settings.address
    return f"http://{host}:{settings.ui_port}"


def find_ui(settings: Settings) -> str | None:
    """The Temporal UI of a server the demo did not start: ``TURNS_UI_URL``, else one that
    answers on ``TURNS_UI_PORT`` of the server's host; None when neither (never a guess)."""
    if settings.ui_url:
        return settings.ui_url
    url = _guessed_ui(settings)
    return url if http_answers(url) else None


async def _front_door(settings: Settings, conversation: str) -> str | None:
    """Serve the chat page (``turns serve``'s app) beside the demo, on the first free port of
    :data:`FRONT_DOOR_PORTS`; its address with the demo's conversation open, or None when the
    web extra is not installed or no port is free. It stops with the demo."""
    try:  # importing FastAPI takes a second or two: not on the worker's event loop
        web = await asyncio.to_thread(importlib.import_module, "durable_turns.web")
        import uvicorn
    except ImportError:
        return None
    from durable_turns.devserver import port_free

    port = next((p for p in FRONT_DOOR_PORTS if port_free(EMBEDDED_HOST, p)), None)
    if port is None:
        return None
    config = uvicorn.Config(
        web.create_app(settings), host=EMBEDDED_HOST, port=port, log_level="warning"
    )

    class BesideTheDemo(uvicorn.Server):
        """Leaves Ctrl-C and SIGTERM to the demo, which stops it (see _stop_front_doors)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    server = BesideTheDemo(config)
    task = asyncio.create_task(server.serve())
    _front_doors[server] = task
    while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn has no event)
        await asyncio.sleep(0.05)
    return f"http://{EMBEDDED_HOST}:{port}/?chat={conversation}" if server.started else None


async def _stop_front_doors() -> None:
    """Stop the chat pages the demo serves, as uvicorn stops (its lifespan closes)."""
    for server, task in list(_front_doors.items()):
        server.should_exit = True
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        _front_doors.pop(server, None)


_front_doors: dict[Any, asyncio.Task[None]] = {}
