"""``python -m bench.cache [--turns 20]``: the share of input tokens served from the prompt cache.

A conversation of ``--turns`` turns (≈1,500-token user messages, a tool call every third
turn) runs per provider through the engine (a Temporal dev server and a real worker process)
against a local server that applies the providers' documented cache rules
(``tests/cache_sim.py``: Anthropic's breakpoints, 20-block lookback, minimum lengths and TTLs;
OpenAI's automatic 1,024-token / 128-token-step prefix cache and ``prompt_cache_key``
routing). Next to it: the same conversation through the SDK directly, written the way each
provider's docs recommend (Anthropic: a breakpoint on the system prompt and one moving to the
last block; OpenAI: a stable prefix and a ``prompt_cache_key``), and the engine with caching
turned off (``TurnConfig.cache=False`` from ``before_turn``).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT, start_engine_worker, temporal_server
from tests.cache_sim import CacheSim, Totals
from tests.llm_server import LLMServer

ANTHROPIC_MODEL = "claude-sonnet-4-5"
OPENAI_MODEL = "gpt-4o"
USER_CHARS = 6000
"""≈1,500 tokens at 4 characters a token."""
TOOL_OUTPUT = "5"
"""What ``tests.support.tools.add`` returns for the simulator's ``{"a": 2, "b": 3}``."""


def user_text(conversation: str, turn: int) -> str:
    words = [f"{conversation[:6]}-t{turn}-w{i}" for i in range(USER_CHARS // 12 + 1)]
    return f"Turn {turn}. " + " ".join(words)[:USER_CHARS]


@dataclass
class Measured:
    label: str
    totals: Totals
    requests: int


# --- the engine ------------------------------------------------------------------------------


async def run_engine(
    address: str, tmp: Path, server: LLMServer, provider: str, turns: int, cache: bool = True
) -> tuple[Measured, list[Any]]:
    """The conversation through the engine; (measured, the turn results)."""
    from temporalio.client import Client

    from durable_turns.client import TurnsClient

    sim = CacheSim()
    server.responder = sim
    queue = f"cache-{provider}-{uuid.uuid4().hex[:6]}"
    env = {
        "TURNS_TOOLS": "tests.support.tools,tests.support.hooks",
        "TURNS_HOOKS": "tests.support.hooks:RecordingHooks",
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "sk-bench",
    }
    worker = start_engine_worker(address, queue, tmp, **env)
    model = f"anthropic:{ANTHROPIC_MODEL}" if provider == "anthropic" else f"openai:{OPENAI_MODEL}"
    body = {} if cache else {"turn_config": {"cache": False}}
    results = []
    try:
        client = await Client.connect(address)
        turns_client = TurnsClient(client, queue)
        conversation = f"bench-cache-{provider}-{uuid.uuid4().hex[:6]}"
        for turn in range(1, turns + 1):
            text = user_text(conversation, turn)
            results.append(await turns_client.send(conversation, text, model=model, body=body))
    finally:
        worker.stop()
        server.responder = None
    label = "engine" if cache else "engine, caching off"
    return Measured(label, sim.totals.get(provider, Totals()), len(sim.log)), results


# --- the documented best practice, through the SDK ---------------------------------------------


def first_request(server: LLMServer, path: str) -> dict[str, Any]:
    return next(r.body for r in server.requests if r.path == path)


async def best_practice_anthropic(
    server: LLMServer, turns: int, tools: list[dict[str, Any]], system: str
) -> Measured:
    """A breakpoint on the system prompt and one on the last block of each request."""
    import warnings

    import anthropic

    warnings.filterwarnings("ignore", category=DeprecationWarning)

    sim = CacheSim()
    server.responder = sim
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-bench", base_url=server.base_url, max_retries=0
    )
    tools = [{k: v for k, v in t.items() if k != "cache_control"} for t in tools]
    conversation = f"direct-{uuid.uuid4().hex[:6]}"
    messages: list[dict[str, Any]] = []
    try:
        for turn in range(1, turns + 1):
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "text", "text": user_text(conversation, turn)}],
                }
            )
            while True:
                sent = copy.deepcopy(messages)
                sent[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
                async with client.messages.stream(
                    model=ANTHROPIC_MODEL,
                    max_tokens=1024,
                    system=[
                        {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}
                    ],
                    tools=tools,  # type: ignore[arg-type]
                    messages=sent,  # type: ignore[arg-type]
                ) as stream:
                    final = await stream.get_final_message()
                blocks = [b.model_dump(exclude_none=True) for b in final.content]
                for b in blocks:
                    b.pop("citations", None)
                messages.append({"role": "assistant", "content": blocks})
                calls = [b for b in blocks if b["type"] == "tool_use"]
                if not calls:
                    break
                results = [
                    {"type": "tool_result", "tool_use_id": c["id"], "content": TOOL_OUTPUT}
                    for c in calls
                ]
                messages.append({"role": "user", "content": results})
    finally:
        await client.close()
        server.responder = None
    return Measured("SDK, documented pattern", sim.totals.get("anthropic", Totals()), len(sim.log))


async def best_practice_openai(
    server: LLMServer, turns: int, tools: list[dict[str, Any]], system: str
) -> Measured:
    """A stable prefix (system, tools) and ``prompt_cache_key`` = the conversation."""
    import openai

    sim = CacheSim()
    server.responder = sim
    client = openai.AsyncOpenAI(api_key="sk-bench", base_url=server.openai_base_url, max_retries=0)
    conversation = f"direct-{uuid.uuid4().hex[:6]}"
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    try:
        for turn in range(1, turns + 1):
            messages.append({"role": "user", "content": user_text(conversation, turn)})
            while True:
                stream = await client.chat.completions.create(
                    model=OPENAI_MODEL,
                    messages=messages,  # type: ignore[arg-type]
                    tools=tools,  # type: ignore[arg-type]
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body={"prompt_cache_key": conversation},
                )
                text, calls = "", {}
                async for chunk in stream:
                    for choice in chunk.choices:
                        text += choice.delta.content or ""
                        for call in choice.delta.tool_calls or []:
                            entry = calls.setdefault(call.index, {"id": call.id, "args": ""})
                            entry["name"] = call.function.name or entry.get("name")
                            entry["args"] += call.function.arguments or ""
                if not calls:
                    messages.append({"role": "assistant", "content": text})
                    break
                messages.append(
                    {
                        "role": "assistant",
                        "content": text or None,
                        "tool_calls": [
                            {
                                "id": c["id"],
                                "type": "function",
                                "function": {"name": c["name"], "arguments": c["args"]},
                            }
                            for c in calls.values()
                        ],
                    }
                )
                for c in calls.values():
                    messages.append(
                        {"role": "tool", "tool_call_id": c["id"], "content": TOOL_OUTPUT}
                    )
    finally:
        await client.close()
        server.responder = None
    return Measured("SDK, documented pattern", sim.totals.get("openai", Totals()), len(sim.log))


# --- the whole measurement -----------------------------------------------------------------------


async def measure(turns: int, address: str, tmp: Path) -> list[tuple[str, Measured]]:
    rows: list[tuple[str, Measured]] = []
    with LLMServer() as server:
        for provider, path in (("anthropic", "/v1/messages"), ("openai", "/v1/chat/completions")):
            server.reset()
            engine, _ = await run_engine(address, tmp, server, provider, turns)
            first = first_request(server, path)
            if provider == "anthropic":
                system = "".join(b["text"] for b in first.get("system") or [])
                direct = await best_practice_anthropic(
                    server, turns, first.get("tools") or [], system
                )
            else:
                system = first["messages"][0]["content"]
                direct = await best_practice_openai(server, turns, first.get("tools") or [], system)
            off, _ = await run_engine(address, tmp, server, provider, turns, cache=False)
            rows += [(provider, engine), (provider, direct), (provider, off)]
    return rows


def render(rows: list[tuple[str, Measured]], turns: int) -> str:
    lines = [
        f"Prompt cache, {turns}-turn conversation (≈1,500-token user messages, a tool call every"
        " third turn), local server with the providers' documented cache rules",
        "",
        "| provider | client | requests | input tokens | read from cache | written to cache"
        " | cached share |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for provider, m in rows:
        t = m.totals
        lines.append(
            f"| {provider} | {m.label} | {t.requests} | {t.input:,} | {t.cache_read:,}"
            f" | {t.cache_write:,} | {t.share:.1%} |"
        )
    return "\n".join(lines)


async def amain(turns: int) -> list[tuple[str, Measured]]:
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        async with temporal_server(Path(tmp)) as (address, _config):
            return await measure(turns, address, Path(tmp))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "cache.md", help="results file"
    )
    args = parser.parse_args()
    rows = asyncio.run(amain(args.turns))
    text = render(rows, args.turns)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
        data = [{"provider": p, "client": m.label, **m.totals.__dict__} for p, m in rows]
        args.out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
