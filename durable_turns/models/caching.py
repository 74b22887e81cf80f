"""Prompt caching: where the breakpoints go, and what keeps a prefix byte-stable.

Both providers cache a prompt's *prefix*: a request reads from the cache only the part of
its beginning that is byte for byte what an earlier request sent. So the engine:

* sends tools sorted by name, each schema with sorted keys (``stable_tools``), so the tool
  list is the same bytes whatever order the registry, a hook or a worker built it in;
* never rewrites older messages between steps or turns (truncation is a pure function of a
  message and its age bucket, ``activities/truncation.py``; compaction rewrites on purpose);
* Anthropic (explicit breakpoints, prefix order tools → system → messages, at most 4
  breakpoints, a 20-block lookback from each, a minimum cacheable length per model, 5-minute
  or 1-hour TTL): marks, in this order of priority,
  1. the last block of the request: this request writes the whole prompt, the next step or
     turn reads it;
  2. the last block before the latest assistant output: where the *previous* request ended,
     so this one reads it exactly even when more than 20 blocks were added since (a step
     with many parallel tool calls);
  3. the system prompt (tools + system: shared by every conversation with the same set-up);
  4. the last tool (tools alone, when the system prompt changes).
  Breakpoints a caller put there itself count against the 4; a top-level ``cache_control``
  (Anthropic's automatic caching) in ``provider_options`` means the caller decides.
* OpenAI (automatic on prefixes of 1,024 tokens or more, in 128-token steps): nothing to
  mark; ``prompt_cache_key`` = the conversation id keeps a conversation's requests on the
  machines that hold its prefix.
"""

from __future__ import annotations

from typing import Any

from durable_turns.hooks.types import CacheConfig, ToolSpec

MAX_BREAKPOINTS = 4
MARKABLE = {"text", "image", "document", "tool_use", "tool_result", "search_result"}
"""Block types that take ``cache_control`` (thinking blocks do not)."""


def canonical(value: Any) -> Any:
    """``value`` with every dict's keys sorted (JSON is sent in insertion order)."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def stable_tools(tools: list[ToolSpec]) -> list[ToolSpec]:
    """Tools sorted by name, schemas with sorted keys: the same bytes on every request."""
    return [
        ToolSpec(name=t.name, description=t.description, input_schema=canonical(t.input_schema))
        for t in sorted(tools, key=lambda t: t.name)
    ]


def effective_cache(cache: CacheConfig, options: dict[str, Any]) -> CacheConfig:
    """``cache`` with a ``"cache"`` provider option (already scoped) over it."""
    override = options.pop("cache", None)
    if override is None:
        return cache
    return cache.merged(CacheConfig.model_validate(override))


def anthropic_marker(cache: CacheConfig) -> dict[str, Any]:
    marker: dict[str, Any] = {"type": "ephemeral"}
    if cache.ttl is not None:
        marker["ttl"] = cache.ttl
    return marker


def place_anthropic_breakpoints(
    body: dict[str, Any], cache: CacheConfig, *, system_only: bool = False
) -> int:
    """Mark the blocks of a Messages body (in place); returns how many were marked.

    ``system_only``: caching is off but the session asked for a cached system prompt.
    """
    if "cache_control" in body:  # automatic caching, chosen through provider_options
        return 0
    if not cache.enabled and not system_only:
        return 0
    messages: list[dict[str, Any]] = body.get("messages") or []
    system = body.get("system")
    if isinstance(system, str) and system:
        system = body["system"] = [{"type": "text", "text": system}]
    tools: list[dict[str, Any]] = body.get("tools") or []

    candidates: list[dict[str, Any] | None] = []
    if not system_only:
        candidates += [_last_markable(messages), _previous_end(messages)]
    candidates.append(_last_markable_block(system) if isinstance(system, list) else None)
    if not system_only:
        candidates.append(tools[-1] if tools and isinstance(tools[-1], dict) else None)

    budget = MAX_BREAKPOINTS - _count_marked(body)
    marker = anthropic_marker(cache)
    chosen: list[dict[str, Any]] = []
    for block in candidates:
        if block is None or budget <= 0 or any(block is c for c in chosen):
            continue
        if "cache_control" in block:
            continue
        chosen.append(block)
        budget -= 1
    for block in chosen:
        block["cache_control"] = dict(marker)
    return len(chosen)


def _last_markable_block(blocks: list[Any]) -> dict[str, Any] | None:
    for block in reversed(blocks):
        if isinstance(block, dict) and block.get("type") in MARKABLE:
            if block.get("type") == "text" and not block.get("text"):
                continue
            return block
    return None


def _message_blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    if isinstance(content, str):  # a caller's own message: make it a block to mark it
        content = message["content"] = [{"type": "text", "text": content}] if content else []
    return content if isinstance(content, list) else []


def _last_markable(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    for message in reversed(messages):
        block = _last_markable_block(_message_blocks(message))
        if block is not None:
            return block
    return None


def _previous_end(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last block before the latest assistant message: where the previous request of
    this conversation ended (the previous step's prompt, or the previous turn's last one)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            return _last_markable(messages[:index])
    return None


def _count_marked(body: dict[str, Any]) -> int:
    count = 0
    system = body.get("system")
    groups: list[list[Any]] = [body.get("tools") or []]
    if isinstance(system, list):
        groups.append(system)
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            groups.append(content)
    for group in groups:
        count += sum(1 for b in group if isinstance(b, dict) and "cache_control" in b)
    return count


def openai_cache_fields(
    cache: CacheConfig, conversation_id: str, options: dict[str, Any]
) -> dict[str, Any]:
    """The body fields of OpenAI's caching: ``prompt_cache_key`` unless the caller set one."""
    if not cache.enabled or "prompt_cache_key" in options:
        return {}
    key = cache.key or conversation_id
    return {"prompt_cache_key": key} if key else {}
