"""``turns demo``: the whole engine on the embedded default, offline, in one command.

It starts an embedded Temporal dev server (UI on :8233) and a worker, runs a conversation
whose turn calls a tool and answers, prints the conversation and where to look at it, and
stops everything again (or keeps it up with ``--keep``).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import uuid

from durable_turns.config import Settings
from durable_turns.contract import turn_workflow_id
from durable_turns.messages import TextPart, ToolCallPart, ToolResultPart
from durable_turns.store import open_store

QUESTIONS = ["What's the weather in Paris?", "And in Tokyo?"]

FRONT_DOOR_PORTS = range(8000, 8010)


async def run_demo(settings: Settings, keep: bool = False) -> int:
    from durable_turns import runtime
    from durable_turns.client import TurnsClient

    if not settings.embedded:
        print(f"using the Temporal server at {settings.address} (TEMPORAL_ADDRESS)")
    settings = settings.with_overrides(task_queue=f"{settings.task_queue}-demo")
    conversation = f"demo-{uuid.uuid4().hex[:8]}"
    async with runtime.embedded_server_if_needed(settings) as server:
        client = await runtime.connect(settings)
        await runtime.check_search_attributes(client, settings.namespace)
        async with runtime.running_worker(client, settings):
            turns = TurnsClient(client, settings.task_queue)
            print(
                f"conversation {conversation}  (model {settings.model}: a scripted demo, not an LLM)\n"
            )
            store = open_store(settings.resolved_store_url)
            await store.open()
            for question in QUESTIONS:
                print(f"user      > {question}")
                result = await turns.send(conversation, question)
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
            ui = server.ui_url if server else "your Temporal UI"
            print("workflows:")
            print(f"  ConversationWorkflow  {conversation}")
            for n in range(1, len(QUESTIONS) + 1):
                print(f"  TurnWorkflow          {turn_workflow_id(conversation, n)}")
            link = f"{ui}/namespaces/{settings.namespace}/workflows?query=ConversationId%3D%22{conversation}%22"
            print(f"transcript:  turns transcript {conversation}")
            if keep:
                print(f"\nTemporal UI: {link}")
                page = await _front_door(settings, conversation)
                print(
                    f"Chat page:   {page}"
                    if page
                    else "Chat page:   (pip install 'durable-turns[web]')"
                )
                print("server, worker and chat page keep running; Ctrl-C stops them.", flush=True)
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    pass
            elif server is not None:
                print(
                    "\nTemporal UI: the demo stops its server as it ends, and the UI with it;"
                    f" run `turns demo --keep` to read these turns at\n  {link}"
                )
            else:
                print(f"\nTemporal UI: {link}")
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    pass
    print("demo finished; nothing left running." if not keep else "stopped.")
    return 0


async def _front_door(settings: Settings, conversation: str) -> str | None:
    """Serve the chat page (``turns serve``'s app) beside the demo, on the first free port of
    :data:`FRONT_DOOR_PORTS`; its address with the demo's conversation open, or None when the
    web extra is not installed."""
    try:  # importing FastAPI takes a second or two: not on the worker's event loop
        web = await asyncio.to_thread(importlib.import_module, "durable_turns.web")
        import uvicorn
    except ImportError:
        return None
    from durable_turns.devserver import port_free

    port = next((p for p in FRONT_DOOR_PORTS if port_free("127.0.0.1", p)), None)
    if port is None:
        return None
    config = uvicorn.Config(
        web.create_app(settings), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    _background.add(task)
    while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn has no event)
        await asyncio.sleep(0.05)
    return f"http://127.0.0.1:{port}/?chat={conversation}" if server.started else None


_background: set[asyncio.Task[None]] = set()
