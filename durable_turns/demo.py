"""``turns demo``: the whole engine on the embedded default, offline, in one command.

It starts an embedded Temporal dev server (UI on :8233) and a worker, runs a conversation
whose turn calls a tool and answers, prints the conversation and where to look at it, and
stops everything again (or keeps it up with ``--keep``).
"""

from __future__ import annotations

import asyncio
import json
import uuid

from durable_turns.config import Settings
from durable_turns.contract import turn_workflow_id
from durable_turns.messages import TextPart, ToolCallPart, ToolResultPart
from durable_turns.store import open_store

QUESTIONS = ["What's the weather in Paris?", "And in Tokyo?"]


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
                print("server and worker keep running; Ctrl-C stops them.")
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
