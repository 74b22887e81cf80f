"""Token economy: prompt-cache breakpoints, a byte-stable prefix, truncation, accounting.

The end-to-end tests run a conversation through a real worker against ``testkit/cache_sim.py``
(the providers' documented cache rules applied to what the real SDKs send).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from bench.cache import best_practice_anthropic, best_practice_openai, user_text
from durable_turns import pricing
from durable_turns.activities.truncation import truncate_message, truncate_older, truncation_cutoff
from durable_turns.hooks.types import (
    CacheConfig,
    StepConfig,
    ToolSpec,
    TruncationConfig,
    TurnConfig,
)
from durable_turns.messages import (
    Message,
    StepStartPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    user_message,
)
from durable_turns.models.anthropic import build_body
from durable_turns.models.base import ModelRequest
from durable_turns.models.caching import stable_tools
from durable_turns.models.openai import chat_body, responses_body
from testkit.cache_sim import CacheSim
from testkit.llm_server import LLMServer
from tests.support.harness import Harness
from tests.support.hooks import start_worker

TOOLS = [
    ToolSpec(name="zeta", input_schema={"type": "object", "properties": {"b": {}, "a": {}}}),
    ToolSpec(
        name="alpha", input_schema={"properties": {"x": {"type": "string"}}, "type": "object"}
    ),
]


def assistant(turn: int, *, tool: bool = False) -> Message:
    parts: list[Any] = [StepStartPart()]
    if tool:
        parts += [
            ToolCallPart(tool_call_id=f"c{turn}", tool_name="alpha", input={"x": "1"}),
            ToolResultPart(tool_call_id=f"c{turn}", tool_name="alpha", output="o" * 900),
            StepStartPart(),
        ]
    parts.append(TextPart(text=f"answer {turn}"))
    return Message(id=f"a{turn}", role="assistant", parts=parts)


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = []
    for turn in range(1, turns + 1):
        messages.append(user_message(f"question {turn}", id=f"u{turn}"))
        messages.append(assistant(turn, tool=turn % 2 == 0))
    return messages


def marked(body: dict[str, Any]) -> list[str]:
    """Where the breakpoints are: tool names, "system", or "role[index]:type"."""
    where = [t["name"] for t in body.get("tools", []) if "cache_control" in t]
    where += ["system" for b in body.get("system", []) if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        where += [f"{m['role']}[{i}]:{b['type']}" for b in m["content"] if "cache_control" in b]
    return where


# --- Anthropic breakpoints ---------------------------------------------------------------------


def test_anthropic_breakpoints_tools_system_previous_end_and_last_block() -> None:
    messages = [*conversation(2), user_message("question 3")]
    body, *_ = build_body(
        ModelRequest(model="claude-sonnet-4-5", system="Sys.", messages=messages, tools=TOOLS)
    )
    # 0 user, 1 assistant, 2 user(q2), 3 assistant(tool_use), 4 user(result), 5 assistant, 6 user
    assert sorted(marked(body)) == sorted(["zeta", "system", "user[4]:tool_result", "user[6]:text"])
    assert [t["name"] for t in body["tools"]] == ["alpha", "zeta"]  # sorted, stable
    assert list(body["tools"][1]["input_schema"]) == ["properties", "type"]
    assert list(body["tools"][1]["input_schema"]["properties"]) == ["a", "b"]
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}


def test_anthropic_cache_settings_ttl_off_and_provider_options_win() -> None:
    messages = [user_message("hi")]
    one_hour = build_body(
        ModelRequest(model="m", system="S", messages=messages, cache=CacheConfig(ttl="1h"))
    )[0]
    assert one_hour["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    off = build_body(ModelRequest(model="m", system="S", messages=messages, cache=False))[0]
    assert marked(off) == []
    system_only = build_body(
        ModelRequest(model="m", system="S", messages=messages, cache="off", cached_prompt=True)
    )[0]
    assert marked(system_only) == ["system"]
    # provider_options win: off for this provider, or automatic caching chosen by the caller
    scoped = {"anthropic": {"cache": False}}
    assert (
        marked(build_body(ModelRequest(model="m", messages=messages, provider_options=scoped))[0])
        == []
    )
    auto = {"cache_control": {"type": "ephemeral"}}
    body = build_body(
        ModelRequest(model="m", system="S", messages=messages, provider_options=auto)
    )[0]
    assert marked(body) == [] and body["cache_control"] == {"type": "ephemeral"}


def test_anthropic_never_more_than_four_breakpoints() -> None:
    own = {
        "anthropic": {
            "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}]
        }
    }
    messages = [*conversation(2), user_message("q")]
    body = build_body(
        ModelRequest(model="m", messages=messages, tools=TOOLS, provider_options=own)
    )[0]
    assert len(marked(body)) == 4


def test_step_cache_merges_over_turn_cache() -> None:
    turn = TurnConfig.model_validate({"cache": "1h"})
    step = StepConfig.model_validate({"cache": False})
    assert turn.cache is not None
    merged = turn.cache.merged(step.cache)
    assert (merged.enabled, merged.ttl) == (False, "1h")
    assert TurnConfig.model_validate({"cache": {"ttl": "5m"}}).cache == CacheConfig(ttl="5m")


# --- OpenAI --------------------------------------------------------------------------------------


def test_openai_prompt_cache_key_is_the_conversation() -> None:
    req = ModelRequest(
        model="gpt-4o", messages=[user_message("hi")], tools=TOOLS, conversation_id="conv-1"
    )
    body, _ = chat_body(req, custom_server=False)
    assert body["prompt_cache_key"] == "conv-1"
    assert [t["function"]["name"] for t in body["tools"]] == ["alpha", "zeta"]
    assert responses_body(req)[0]["prompt_cache_key"] == "conv-1"
    keyed = req.model_copy(update={"cache": CacheConfig(key="tenant-7")})
    assert chat_body(keyed, custom_server=False)[0]["prompt_cache_key"] == "tenant-7"
    off = req.model_copy(update={"cache": CacheConfig(enabled=False)})
    assert "prompt_cache_key" not in chat_body(off, custom_server=False)[0]
    mine = req.model_copy(update={"provider_options": {"openai": {"prompt_cache_key": "mine"}}})
    assert chat_body(mine, custom_server=False)[0]["prompt_cache_key"] == "mine"


def test_stable_tools_is_independent_of_input_order() -> None:
    a = [t.model_dump() for t in stable_tools(TOOLS)]
    b = [t.model_dump() for t in stable_tools(list(reversed(TOOLS)))]
    assert json.dumps(a) == json.dumps(b)


# --- truncation ----------------------------------------------------------------------------------


def test_truncation_follows_thinks_rule_with_every_1() -> None:
    config = TruncationConfig(every=1)
    messages = conversation(4)  # 8 messages: the first 4 are truncated
    out = truncate_older(messages, config)
    assert out[4:] == messages[4:]
    result = next(p for p in out[3].parts if isinstance(p, ToolResultPart))
    assert result.output.startswith("o" * 500) and "truncated 400 characters" in result.output
    long_text = user_message("x" * 10_050)
    assert truncate_message(long_text, config).text.startswith("x" * 10_000)
    assert len(truncate_message(long_text, config).text) < 10_050
    assert truncate_older(messages, TruncationConfig(enabled=False)) is messages


def test_truncation_moves_in_buckets_so_the_prefix_stays_stable() -> None:
    config = TruncationConfig()  # keep 4, every 8
    cutoffs = [truncation_cutoff(n, config) for n in range(0, 30)]
    assert cutoffs[:12] == [0] * 12 and cutoffs[12] == 8 and cutoffs[19] == 8 and cutoffs[20] == 16
    full = conversation(12)
    previous: list[Message] | None = None
    rewrites = 0
    for n in range(2, len(full) + 1, 2):  # one turn at a time
        now = truncate_older(full[:n], config)
        if previous is not None:
            same = [
                a.model_dump_json() == b.model_dump_json()
                for a, b in zip(previous, now, strict=False)
            ]
            rewrites += not all(same)
        previous = now
    # Think's rule rewrites older messages nearly every turn; the buckets, once per 4 turns
    assert rewrites <= 3


def test_turn_config_truncation_shorthand() -> None:
    assert TurnConfig.model_validate({"truncation": False}).truncation == TruncationConfig(
        enabled=False
    )


# --- pricing -------------------------------------------------------------------------------------


def test_cost_estimate_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    usage = Usage(
        input_tokens=10_000,
        cached_input_tokens=8_000,
        cache_creation_input_tokens=1_000,
        output_tokens=1_000,
    )
    cost = pricing.estimate_cost("anthropic:claude-sonnet-4-5-20250929", usage)
    assert cost == pytest.approx((1_000 * 3 + 8_000 * 0.3 + 1_000 * 3.75 + 1_000 * 15) / 1e6)
    assert pricing.estimate_cost("openai:my-local-llama", usage) is None
    assert pricing.price_for("openai:gpt-4o-mini-2024") == pricing.DEFAULT_PRICES["gpt-4o-mini"]
    monkeypatch.setenv("TURNS_PRICES", json.dumps({"my-local": {"input": 1, "output": 1}}))
    assert pricing.estimate_cost("openai:my-local-llama", usage) == pytest.approx(11_000 / 1e6)
    text = pricing.usage_text(usage, 0.0123)
    assert text == "10.0k in · 80% cached · 1.0k out · $0.0123"


# --- end to end ----------------------------------------------------------------------------------

TURNS = 6


def _blocks(body: dict[str, Any]) -> list[tuple[str, Any]]:
    blocks = [("tool", t) for t in body.get("tools", [])] + [
        ("system", b) for b in body.get("system", [])
    ]
    for m in body["messages"]:
        blocks += [(m["role"], b) for b in m["content"]]
    return blocks


def _plain(block: Any) -> str:
    return json.dumps(
        {k: v for k, v in block.items() if k != "cache_control"}, separators=(",", ":")
    )


async def _converse(
    harness: Harness, model: str, name: str, turns: int = TURNS, body: Any = None
) -> tuple[str, list[Any]]:
    conv = harness.conv(name)
    results = []
    for turn in range(1, turns + 1):
        results.append(
            await harness.send(conv, user_text(conv, turn), model=model, body=body or {})
        )
    return conv, results


@pytest.fixture
def sim(server: LLMServer) -> Any:
    sim = CacheSim()
    server.responder = sim
    yield sim
    server.responder = None


async def test_anthropic_conversation_is_served_from_the_cache(
    server: LLMServer, harness: Harness, sim: CacheSim
) -> None:
    start_worker(harness, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="sk-ant-test")
    conv, results = await _converse(harness, "anthropic:claude-sonnet-4-5", "cache-a")
    assert all(r.status == "completed" for r in results)
    engine = sim.totals["anthropic"]

    # consecutive requests share their prefix byte for byte up to the earlier one's last breakpoint
    bodies = [r.body for r in server.requests if r.path == "/v1/messages"]
    assert len(bodies) == TURNS + TURNS // 3  # a tool step every third turn
    for before, after in itertools.pairwise(bodies):
        a, b = _blocks(before), _blocks(after)
        last = max(i for i, (_, block) in enumerate(a) if "cache_control" in block)
        assert [(r, _plain(x)) for r, x in a[: last + 1]] == [
            (r, _plain(x)) for r, x in b[: last + 1]
        ]

    # the documented pattern through the SDK, same conversation shape, same server rules
    first = bodies[0]
    system = "".join(x["text"] for x in first["system"])
    direct = await best_practice_anthropic(server, TURNS, first["tools"], system)
    assert engine.share >= 0.75
    assert engine.share >= direct.totals.share - 0.03

    # accounting: on_step_finish, the turn's result, the conversation's state
    reads = [
        c["usage"]["cached_input_tokens"]
        for c in harness.hook_calls()
        if c["hook"] == "on_step_finish"
    ]
    assert reads and max(reads) > 0
    last = results[-1]
    assert last.usage.cached_input_tokens > 0 and "% cached" in last.usage_text
    assert last.cost_usd is not None and last.cost_usd > 0
    state = await harness.turns.state(conv)
    assert state.usage.input_tokens == sum(r.usage.input_tokens for r in results)
    assert state.cost_usd == pytest.approx(sum(r.cost_usd or 0 for r in results))


async def test_a_hook_turns_caching_off(server: LLMServer, harness: Harness, sim: CacheSim) -> None:
    start_worker(harness, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="sk-ant-test")
    body = {"turn_config": {"cache": "off"}}
    await _converse(harness, "anthropic:claude-sonnet-4-5", "cache-off", turns=2, body=body)
    sent = [r.body for r in server.requests if r.path == "/v1/messages"]
    assert sent and all(marked(b) == [] for b in sent)
    assert sim.totals["anthropic"].cache_read == 0


async def test_openai_conversation_is_served_from_the_cache(
    server: LLMServer, harness: Harness, sim: CacheSim
) -> None:
    start_worker(harness, OPENAI_BASE_URL=server.openai_base_url, OPENAI_API_KEY="sk-test")
    conv, results = await _converse(harness, "openai:gpt-4o", "cache-o")
    assert all(r.status == "completed" for r in results)
    bodies = [r.body for r in server.requests if r.path == "/v1/chat/completions"]
    assert {b["prompt_cache_key"] for b in bodies} == {conv}
    engine = sim.totals["openai"]
    first = bodies[0]
    direct = await best_practice_openai(
        server, TURNS, first["tools"], first["messages"][0]["content"]
    )
    assert engine.share >= 0.75
    assert engine.share >= direct.totals.share - 0.03
    assert results[-1].usage.cached_input_tokens > 0


async def test_usage_carries_cache_reads_for_every_api(server: LLMServer) -> None:
    """Responses' ``input_tokens_details.cached_tokens``, Chat's ``prompt_tokens_details``,
    Anthropic's ``cache_read_input_tokens`` / ``cache_creation_input_tokens``."""
    from durable_turns.messages import FinishChunk
    from durable_turns.models.anthropic import AnthropicProvider
    from durable_turns.models.openai import OpenAIProvider
    from testkit.llm_server import FIXTURES, Reply

    text = (FIXTURES / "openai/responses_text.sse").read_text()
    server.push(Reply(body=text.replace('"cached_tokens":0', '"cached_tokens":120')))
    openai_provider = OpenAIProvider(api_key="sk-test", base_url=server.openai_base_url)
    request = ModelRequest(model="gpt-5@responses", messages=[user_message("hi")])
    finish = [p async for p in openai_provider.stream(request) if isinstance(p, FinishChunk)]
    assert finish[0].usage.cached_input_tokens == 120
    assert server.requests[-1].body.get("prompt_cache_key") is None  # no conversation id
    await openai_provider.aclose()

    server.responder = CacheSim()
    try:
        anthropic_provider = AnthropicProvider(api_key="k", base_url=server.base_url)
        long = ModelRequest(model="claude-sonnet-4-5", messages=[user_message("x" * 8000)])
        usages = []
        for _ in range(2):
            async for part in anthropic_provider.stream(long):
                if isinstance(part, FinishChunk):
                    usages.append(part.usage)
        await anthropic_provider.aclose()
    finally:
        server.responder = None
    assert usages[0].cache_creation_input_tokens > 0 and usages[0].cached_input_tokens == 0
    assert usages[1].cached_input_tokens == usages[0].cache_creation_input_tokens
    assert usages[1].input_tokens == usages[0].input_tokens
