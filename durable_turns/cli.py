"""The ``turns`` command line.

turns demo                          run the offline demo end to end, then clean up
turns worker [--tools M] [--hooks M:C]   run a worker (embedded server if no TEMPORAL_ADDRESS)
turns server                        run only the embedded Temporal dev server
turns chat CONV "message" [--model ID]   run a turn and print the reply
turns continue CONV                 continue the last assistant message
turns cancel CONV [--request ID]    cancel a queued request or the running turn
turns state CONV                    the conversation's state as JSON
turns transcript CONV               the stored messages
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from durable_turns.client import TurnsClient
from durable_turns.config import Settings
from durable_turns.contract import TurnResult, id_problem
from durable_turns.devserver import EmbeddedServer, port_open


def _print_result(result: TurnResult) -> None:
    if result.text:
        print(result.text)
    line = f"[turn {result.turn_number} · {result.status} · {result.steps} step(s) · {result.workflow_id}]"
    if result.error:
        line += f"\nerror ({result.error.type}): {result.error.message}"
    print(line, file=sys.stderr if result.status != "completed" else sys.stdout)


async def _client(settings: Settings) -> TurnsClient:
    if settings.embedded and not port_open("127.0.0.1", settings.embedded_port):
        sys.exit(
            f"no Temporal server at {settings.address}: start a worker first (`turns worker`),"
            " or set TEMPORAL_ADDRESS"
        )
    return await TurnsClient.connect(settings)


async def chat(args: argparse.Namespace, settings: Settings) -> int:
    """Submit the message, print the reply live from the chunk stream, then its status."""
    client = await _client(settings)
    body = json.loads(args.body) if args.body else None
    request_id = await client.submit(args.conversation, args.message, model=args.model, body=body)
    number = await client.turn_number(args.conversation, request_id)
    if number and client.stream_url not in ("none", "off"):
        await _print_live(client, args.conversation, number)
    result = await client.wait(args.conversation, request_id)
    if not number or client.stream_url in ("none", "off"):
        _print_result(result)
    else:
        _print_result(result.model_copy(update={"text": ""}))
    await client.aclose()
    return 0 if result.status == "completed" else 1


async def _print_live(client: Any, conversation: str, number: int) -> None:
    out = sys.stdout
    async for event in client.chunks(conversation, number):
        if event.type == "chunk" and event.data.get("type") == "text-delta":
            out.write(event.data["text"])
            out.flush()
        elif event.type == "chunk" and event.data.get("type") == "tool-call":
            out.write(
                f"\n  → {event.data['tool_name']}({json.dumps(event.data['input'], ensure_ascii=False)})\n"
            )
        elif event.type == "tool-result":
            out.write(f"  ← {json.dumps(event.data.get('output'), ensure_ascii=False)}\n")
        elif event.type == "reset":
            out.write("\n[the model step is being retried; its partial output above is replaced]\n")
        elif event.type == "step-start" and event.step:
            out.write("\n")
    out.write("\n")


async def continue_turn(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    request_id = await client.continue_last_turn(args.conversation)
    result = await client.wait(args.conversation, request_id)
    _print_result(result)
    return 0 if result.status in ("completed", "skipped") else 1


async def cancel(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    await client.cancel(args.conversation, args.request)
    print("cancel requested")
    return 0


async def state(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    print((await client.state(args.conversation)).model_dump_json(indent=2))
    return 0


async def transcript(args: argparse.Namespace, settings: Settings) -> int:
    from durable_turns.store import open_store

    async with open_store(settings.resolved_store_url) as store:
        for message in await store.messages(args.conversation):
            if args.json:
                print(message.model_dump_json())
                continue
            print(f"--- {message.role} ({message.id})")
            for part in message.parts:
                print(_describe(part.model_dump()))
    return 0


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
    srv = EmbeddedServer(settings.data_dir, port=settings.embedded_port, ui_port=settings.ui_port)
    await srv.start()
    print(f"Temporal dev server on {srv.address}; UI at {srv.ui_url}. Ctrl-C stops it.", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        srv.stop()
    return 0


async def demo(args: argparse.Namespace, settings: Settings) -> int:
    from durable_turns.demo import run_demo

    return await run_demo(settings, keep=args.keep)


def parser() -> argparse.ArgumentParser:
    from durable_turns import runtime

    p = argparse.ArgumentParser(
        prog="turns", description="durable-turns: every chat turn a Temporal workflow"
    )
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
    k = sub.add_parser("continue", help="continue the last assistant message")
    k.add_argument("conversation")
    x = sub.add_parser("cancel", help="cancel a request or the running turn")
    x.add_argument("conversation")
    x.add_argument("--request", help="request id (default: the running turn)")
    s = sub.add_parser("state", help="show a conversation's state")
    s.add_argument("conversation")
    t = sub.add_parser("transcript", help="show a conversation's stored messages")
    t.add_argument("conversation")
    t.add_argument("--json", action="store_true", help="one JSON message per line")
    return p


COMMANDS = {
    "chat": chat,
    "continue": continue_turn,
    "cancel": cancel,
    "state": state,
    "transcript": transcript,
    "server": server,
    "demo": demo,
}


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command == "worker":
        from durable_turns import runtime

        runtime.main(argv[1:] if argv else sys.argv[2:])
        return
    conversation = getattr(args, "conversation", None)
    if conversation is not None and (problem := id_problem(conversation)):
        parser().exit(2, f"turns {args.command}: invalid conversation id: {problem}\n")
    settings = Settings.from_env()
    try:
        code = asyncio.run(COMMANDS[args.command](args, settings))
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
