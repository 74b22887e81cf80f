"""``python -m bench.cache [--turns 20]``: the share of input tokens served from the prompt cache.

A conversation of ``--turns`` turns (≈1,500-token user messages, a tool call every third
turn) runs per provider through the engine (a Temporal dev server and a real worker process)
against a local server that applies the providers' documented cache rules
(``testkit/cache_sim.py``: Anthropic's breakpoints, 20-block lookback, minimum lengths and TTLs;
OpenAI's automatic 1,024-token / 128-token-step prefix cache and ``prompt_cache_key``
routing). Next to it: the same conversation through the SDK directly, written the way each
provider's docs recommend (Anthropic: a breakpoint on the system prompt and one moving to the
last block; OpenAI: a stable prefix and a ``prompt_cache_key``), and the engine with caching
turned off (``TurnConfig.cache=False`` from ``before_turn``).

``--mcp`` runs it with MCP tools in the set instead (written to ``cache-mcp.md``): the worker
is also given two stdio MCP servers, the SDK-built test server (``testkit/mcp_server.py``)
and, where node and ``tests/js`` are installed, the reference ``server-everything``; the tool
call goes to ``mcp__t__add``, and the worker is replaced by a new one every
``--restart-every`` turns (new server processes, tool lists listed anew), so the table shows
whether the tool list reaches the provider as the same bytes every time (its "tool lists"
column counts the distinct ``tools`` arrays sent).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import shutil
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT, start_engine_worker, temporal_server
from testkit.cache_sim import CacheSim, Totals
from testkit.llm_server import LLMServer

ANTHROPIC_MODEL = "claude-sonnet-4-5"
OPENAI_MODEL = "gpt-4o"
USER_CHARS = 6000
"""≈1,500 tokens at 4 characters a token."""
TOOL_OUTPUT = "5"
"""What ``testkit.tools.add`` returns for the simulator's ``{"a": 2, "b": 3}``."""
MCP_TOOL = "mcp__t__add"
MCP_TOOL_OUTPUT = '{"sum": 5}'
"""What the test server's ``add`` returns for it, as the engine sends it to the model."""
EVERYTHING = ROOT / "tests" / "js" / "node_modules" / "@modelcontextprotocol" / "server-everything"


def user_text(conversation: str, turn: int) -> str:
    words = [f"{conversation[:6]}-t{turn}-w{i}" for i in range(USER_CHARS // 12 + 1)]
    return f"Turn {turn}. " + " ".join(words)[:USER_CHARS]


@dataclass
class Measured:
    label: str
    totals: Totals
    requests: int
    tools: int = 0
    """Tools in the first request."""
    tool_lists: int = 0
    """Distinct ``tools`` arrays sent (1: the same bytes on every request)."""


def mcp_config(tmp: Path) -> tuple[Path, list[str]]:
    """The MCP servers of ``--mcp``: the test server, and server-everything where it is
    installed; (the config file, the servers' names)."""
    servers: dict[str, dict[str, Any]] = {
        "t": {"command": sys.executable, "args": [str(ROOT / "testkit/mcp_server.py")]}
    }
    node = shutil.which("node")
    if node is not None and (EVERYTHING / "package.json").exists():
        manifest = json.loads((EVERYTHING / "package.json").read_text())
        entry = EVERYTHING / manifest["bin"]["mcp-server-everything"]
        servers["e"] = {"command": node, "args": [str(entry), "stdio"]}
    path = tmp / "bench-mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path, list(servers)


def tool_lists(server: LLMServer, path: str) -> tuple[int, int]:
    """(tools in the first request, distinct tools arrays) of the requests to ``path``."""
    sent = [r.body.get("tools") or [] for r in server.requests if r.path == path]
    distinct = {json.dumps(t, sort_keys=False) for t in sent}
    return (len(sent[0]) if sent else 0), len(distinct)


# --- the engine ------------------------------------------------------------------------------


async def run_engine(
    address: str,
    tmp: Path,
    server: LLMServer,
    provider: str,
    turns: int,
    cache: bool = True,
    mcp: Path | None = None,
    restart_every: int = 0,
) -> tuple[Measured, list[Any]]:
    """The conversation through the engine; (measured, the turn results). ``mcp``: a config
    file of MCP servers for the worker (the tool call goes to ``mcp__t__add``);
    ``restart_every``: a new worker every that many turns."""
    from temporalio.client import Client

    from durable_turns.client import TurnsClient

    sim = CacheSim(tool_name=MCP_TOOL) if mcp is not None else CacheSim()
    server.responder = sim
    queue = f"cache-{provider}-{uuid.uuid4().hex[:6]}"
    env = {
        "TURNS_TOOLS": "testkit.tools,testkit.hooks",
        "TURNS_HOOKS": "testkit.hooks:RecordingHooks",
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "sk-bench",
    }
    if mcp is not None:
        env["TURNS_MCP_CONFIG"] = str(mcp)
    worker = start_engine_worker(address, queue, tmp, **env)
    model = f"anthropic:{ANTHROPIC_MODEL}" if provider == "anthropic" else f"openai:{OPENAI_MODEL}"
    body = {} if cache else {"turn_config": {"cache": False}}
    results = []
    try:
        client = await Client.connect(address)
        turns_client = TurnsClient(client, queue)
        conversation = f"bench-cache-{provider}-{uuid.uuid4().hex[:6]}"
        for turn in range(1, turns + 1):
            if restart_every and turn > 1 and (turn - 1) % restart_every == 0:
                worker.stop()  # the next worker starts its MCP servers and lists them anew
                worker = start_engine_worker(address, queue, tmp, **env)
            text = user_text(conversation, turn)
            results.append(await turns_client.send(conversation, text, model=model, body=body))
    finally:
        worker.stop()
        server.responder = None
    label = "engine" if cache else "engine, caching off"
    if mcp is not None:
        label = "engine + MCP tools" + (
            f", a new worker every {restart_every} turns" if restart_every else ""
        )
    path = "/v1/messages" if provider == "anthropic" else "/v1/chat/completions"
    count, distinct = tool_lists(server, path)
    measured = Measured(label, sim.totals.get(provider, Totals()), len(sim.log), count, distinct)
    return measured, results


# --- the documented best practice, through the SDK ---------------------------------------------


def first_request(server: LLMServer, path: str) -> dict[str, Any]:
    return next(r.body for r in server.requests if r.path == path)


async def best_practice_anthropic(
    server: LLMServer,
    turns: int,
    tools: list[dict[str, Any]],
    system: str,
    tool_output: str = TOOL_OUTPUT,
    tool_name: str = "add",
) -> Measured:
    """A breakpoint on the system prompt and one on the last block of each request."""
    import warnings

    import anthropic

    warnings.filterwarnings("ignore", category=DeprecationWarning)

    sim = CacheSim(tool_name=tool_name)
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
                    {"type": "tool_result", "tool_use_id": c["id"], "content": tool_output}
                    for c in calls
                ]
                messages.append({"role": "user", "content": results})
    finally:
        await client.close()
        server.responder = None
    totals = sim.totals.get("anthropic", Totals())
    return Measured("SDK, documented pattern", totals, len(sim.log), len(tools), 1)


async def best_practice_openai(
    server: LLMServer,
    turns: int,
    tools: list[dict[str, Any]],
    system: str,
    tool_output: str = TOOL_OUTPUT,
    tool_name: str = "add",
) -> Measured:
    """A stable prefix (system, tools) and ``prompt_cache_key`` = the conversation."""
    import openai

    sim = CacheSim(tool_name=tool_name)
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
                        {"role": "tool", "tool_call_id": c["id"], "content": tool_output}
                    )
    finally:
        await client.close()
        server.responder = None
    totals = sim.totals.get("openai", Totals())
    return Measured("SDK, documented pattern", totals, len(sim.log), len(tools), 1)


# --- the whole measurement -----------------------------------------------------------------------


async def measure(
    turns: int, address: str, tmp: Path, mcp: bool = False, restart_every: int = 5
) -> list[tuple[str, Measured]]:
    """Per provider: the engine, the SDK's documented pattern with the same tools and the
    engine with caching off; with ``mcp``: the engine with its own tools, the engine with MCP
    tools too (a new worker every ``restart_every`` turns), and the SDK with those tools."""
    rows: list[tuple[str, Measured]] = []
    config = mcp_config(tmp)[0] if mcp else None
    output, name = (MCP_TOOL_OUTPUT, MCP_TOOL) if mcp else (TOOL_OUTPUT, "add")
    with LLMServer() as server:
        for provider, path in (("anthropic", "/v1/messages"), ("openai", "/v1/chat/completions")):
            server.reset()
            plain: Measured | None = None
            if mcp:
                plain, _ = await run_engine(address, tmp, server, provider, turns)
                server.reset()
            engine, _ = await run_engine(
                address, tmp, server, provider, turns, mcp=config, restart_every=restart_every * mcp
            )
            first = first_request(server, path)
            tools = first.get("tools") or []
            if provider == "anthropic":
                system = "".join(b["text"] for b in first.get("system") or [])
                direct = await best_practice_anthropic(server, turns, tools, system, output, name)
            else:
                system = first["messages"][0]["content"]
                direct = await best_practice_openai(server, turns, tools, system, output, name)
            if plain is not None:
                rows += [(provider, plain), (provider, engine), (provider, direct)]
                continue
            off, _ = await run_engine(address, tmp, server, provider, turns, cache=False)
            rows += [(provider, engine), (provider, direct), (provider, off)]
    return rows


def render(rows: list[tuple[str, Measured]], turns: int, servers: list[str] | None = None) -> str:
    """The table; ``servers``: the MCP servers of an ``--mcp`` run (adds the tool columns)."""
    title = (
        f"Prompt cache, {turns}-turn conversation (≈1,500-token user messages, a tool call every"
        " third turn), local server with the providers' documented cache rules"
    )
    if servers is None:
        lines = [
            title,
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
    lines = [
        f"{title}; with MCP tools from the stdio servers {', '.join(servers)}"
        f" ({MCP_TOOL} called every third turn)",
        "",
        "| provider | client | tools | tool lists | requests | input tokens | read from cache"
        " | written to cache | cached share |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for provider, m in rows:
        t = m.totals
        lines.append(
            f"| {provider} | {m.label} | {m.tools} | {m.tool_lists} | {t.requests} | {t.input:,}"
            f" | {t.cache_read:,} | {t.cache_write:,} | {t.share:.1%} |"
        )
    lines += [
        "",
        "tools: in the request; tool lists: distinct `tools` arrays sent over the conversation"
        " (1: byte for byte the same on every request, across worker restarts).",
    ]
    return "\n".join(lines)


async def amain(
    turns: int, mcp: bool = False, restart_every: int = 5
) -> tuple[list[tuple[str, Measured]], list[str] | None]:
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        async with temporal_server(Path(tmp)) as (address, _config):
            rows = await measure(turns, address, Path(tmp), mcp, restart_every)
            return rows, (mcp_config(Path(tmp))[1] if mcp else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--mcp", action="store_true", help="with MCP tools in the tool set")
    parser.add_argument(
        "--restart-every", type=int, default=5, help="--mcp: a new worker every N turns (0: never)"
    )
    parser.add_argument("--out", type=Path, default=None, help="results file")
    args = parser.parse_args()
    out = args.out or ROOT / "bench" / "results" / ("cache-mcp.md" if args.mcp else "cache.md")
    rows, servers = asyncio.run(amain(args.turns, args.mcp, args.restart_every))
    text = render(rows, args.turns, servers)
    print(text)
    out.write_text(text + "\n")
    data = [
        {
            "provider": p,
            "client": m.label,
            **m.totals.__dict__,
            **({"tools": m.tools, "tool_lists": m.tool_lists} if args.mcp else {}),
        }
        for p, m in rows
    ]
    out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
