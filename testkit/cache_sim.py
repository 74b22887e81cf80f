"""A cache-accounting mode for ``testkit/llm_server.py``: the providers' documented prompt-cache
rules, applied to the requests the real SDKs send, with scripted answers.

Set an instance as ``LLMServer.responder``. Every request is answered with a generated SSE
stream (Anthropic Messages or OpenAI Chat Completions) whose usage says how much of the
prompt was read from and written to the cache, by these rules:

Anthropic (explicit breakpoints, ``cache_control`` on blocks):
* the prompt is a sequence of blocks in the order tools → system → messages; a prefix is
  identified by the bytes of its blocks (``cache_control`` excluded), so any change to an
  earlier block changes every later prefix;
* at most 4 breakpoints (more is a 400, as the API answers); a top-level ``cache_control``
  (automatic caching) is a breakpoint on the last block;
* a lookup at each breakpoint tries that prefix and up to 19 shorter ones (the 20-block
  lookback); the longest live entry found is read;
* each breakpoint whose prefix reaches the model's minimum cacheable length writes an entry
  that lives ``ttl`` (5 minutes or 1 hour) from its last use; a read refreshes it;
* usage: ``cache_read_input_tokens`` (the hit), ``cache_creation_input_tokens`` (from the
  hit to the last written breakpoint), ``input_tokens`` (the rest).

OpenAI (automatic): a prompt of 1,024 tokens or more is cached by prefix in 128-token steps
on the machine it is routed to (by its first ~256 tokens and ``prompt_cache_key``); a later
request on that machine reads the longest stored prefix, rounded down to the 128-token grid.
Entries live 10 minutes from their last use (OpenAI: "5 to 10 minutes of inactivity").

Tokens are estimated at 4 characters of the block's JSON each. The clock is injectable so a
test can step past a TTL.

Answers: a user text message gets a tool call on every ``tool_every``-th user turn (to the
tool named ``tool_name``, else the first tool), otherwise ``answer_chars`` of text; a tool
result gets text.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from testkit.llm_server import Recorded, Reply

LOOKBACK = 20
MAX_BREAKPOINTS = 4
OPENAI_MIN = 1024
OPENAI_STEP = 128
OPENAI_TTL_S = 600.0
TTL_S = {"5m": 300.0, "1h": 3600.0}


def anthropic_min_tokens(model: str) -> int:
    """The minimum cacheable prompt length of a Claude model (Anthropic's table)."""
    if any(m in model for m in ("opus-4-5", "opus-4-6", "haiku-4-5")):
        return 4096
    if any(m in model for m in ("haiku-3", "3-haiku", "3-5-haiku", "sonnet-4-6")):
        return 2048
    return 1024


def tokens(value: Any) -> int:
    return max(1, len(_dump(value)) // 4)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _without_marker(block: Any) -> Any:
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


@dataclass
class Totals:
    requests: int = 0
    input: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def share(self) -> float:
        return self.cache_read / self.input if self.input else 0.0


@dataclass
class CacheSim:
    clock: Callable[[], float] = time.monotonic
    tool_every: int = 3
    tool_name: str = "add"
    tool_input: dict[str, Any] = field(default_factory=lambda: {"a": 2, "b": 3})
    answer_chars: int = 600
    machines: int = 4
    totals: dict[str, Totals] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    """Per request: provider, input, cache_read, cache_write."""
    _anthropic: dict[str, float] = field(default_factory=dict)
    _openai: dict[tuple[int, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: int = 0

    def __call__(self, request: Recorded) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        with self._lock:
            self._ids += 1
            if request.path == "/v1/messages":
                return self._anthropic_reply(body)
            if request.path == "/v1/chat/completions":
                return self._chat_reply(body)
        error = {"error": {"message": f"cache_sim does not serve {request.path}"}}
        return Reply(body=json.dumps(error), status=400)

    def reset_totals(self) -> None:
        with self._lock:
            self.totals.clear()
            self.log.clear()

    def _count(self, provider: str, total: int, read: int, write: int) -> None:
        t = self.totals.setdefault(provider, Totals())
        t.requests += 1
        t.input += total
        t.cache_read += read
        t.cache_write += write
        self.log.append(
            {"provider": provider, "input": total, "cache_read": read, "cache_write": write}
        )

    # --- Anthropic ---------------------------------------------------------------------

    def anthropic_usage(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(uncached input, cache read, cache write) of one Messages request."""
        now = self.clock()
        blocks: list[tuple[str, Any]] = [("tool", t) for t in body.get("tools") or []]
        system = body.get("system")
        if isinstance(system, str) and system:
            blocks.append(("system", {"type": "text", "text": system}))
        elif isinstance(system, list):
            blocks += [("system", b) for b in system]
        for message in body.get("messages") or []:
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            blocks += [(message.get("role", ""), b) for b in content or []]
        if not blocks:
            return 0, 0, 0
        hashes: list[str] = []
        cumulative: list[int] = []
        marks: list[str | None] = []
        digest = hashlib.sha256(str(body.get("model")).encode())
        running = 0
        for role, block in blocks:
            digest.update(f"\x00{role}\x00{_dump(_without_marker(block))}".encode())
            hashes.append(digest.copy().hexdigest())
            running += tokens(_without_marker(block))
            cumulative.append(running)
            marker = block.get("cache_control") if isinstance(block, dict) else None
            marks.append((marker.get("ttl") or "5m") if isinstance(marker, dict) else None)
        auto = body.get("cache_control")
        if isinstance(auto, dict) and marks[-1] is None:
            marks[-1] = auto.get("ttl") or "5m"
        breakpoints = [i for i, m in enumerate(marks) if m is not None]
        if len(breakpoints) > MAX_BREAKPOINTS:
            raise ValueError(f"{len(breakpoints)} cache breakpoints (the API allows 4)")
        hit = -1
        for bp in breakpoints:
            for j in range(bp, max(bp - LOOKBACK, -1), -1):
                expiry = self._anthropic.get(hashes[j])
                if expiry is not None and expiry > now:
                    hit = max(hit, j)
                    break
        read = cumulative[hit] if hit >= 0 else 0
        if hit >= 0:
            ttl = TTL_S[marks[hit] or "5m"] if marks[hit] else 300.0
            self._anthropic[hashes[hit]] = max(self._anthropic[hashes[hit]], now + ttl)
        minimum = anthropic_min_tokens(str(body.get("model")))
        written_to = hit
        for bp in breakpoints:
            if cumulative[bp] >= minimum:
                self._anthropic[hashes[bp]] = now + TTL_S.get(marks[bp] or "5m", 300.0)
                written_to = max(written_to, bp)
        write = cumulative[written_to] - read if written_to > hit else 0
        total = cumulative[-1]
        self._count("anthropic", total, read, write)
        return total - read - write, read, write

    def _anthropic_reply(self, body: dict[str, Any]) -> Reply:
        uncached, read, write = self.anthropic_usage(body)
        model = body.get("model", "claude")
        msg_id = f"msg_sim{self._ids:06d}"
        start_usage = {
            "input_tokens": uncached,
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
            "output_tokens": 1,
        }
        start = {
            "type": "message_start",
            "message": {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": model,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        }
        events: list[tuple[str, dict[str, Any]]] = [("message_start", start)]
        call = self._wants_tool(_anthropic_turn(body), body.get("tools") or [])
        if call is not None:
            block = {"type": "tool_use", "id": f"toolu_sim{self._ids:06d}", "name": call}
            block["input"] = {}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(self.tool_input)}
            stop, out = "tool_use", 20
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": self._answer(body)}
            stop, out = "end_turn", self.answer_chars // 4
        events += [
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            ),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {**start_usage, "output_tokens": out},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        text = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
        return Reply(body=text)

    # --- OpenAI Chat Completions -----------------------------------------------------------

    def openai_usage(self, body: dict[str, Any]) -> tuple[int, int]:
        """(prompt tokens, cached tokens) of one Chat Completions request."""
        now = self.clock()
        segments = [*(body.get("tools") or []), *(body.get("messages") or [])]
        head = "".join(_dump(s) for s in segments)[: 256 * 4]
        route = hashlib.sha256(f"{head}\x00{body.get('prompt_cache_key') or ''}".encode())
        machine = int(route.hexdigest(), 16) % self.machines
        digest = hashlib.sha256(str(body.get("model")).encode())
        running = 0
        entries: list[tuple[str, int]] = []
        for segment in segments:
            digest.update(f"\x00{_dump(segment)}".encode())
            running += tokens(segment)
            entries.append((digest.copy().hexdigest(), running))
        total = running
        best = 0
        for key, length in entries:
            expiry = self._openai.get((machine, key))
            if expiry is not None and expiry > now:
                best = max(best, length)
                self._openai[(machine, key)] = now + OPENAI_TTL_S
        cached = 0
        if best >= OPENAI_MIN:
            cached = OPENAI_MIN + (best - OPENAI_MIN) // OPENAI_STEP * OPENAI_STEP
        if total >= OPENAI_MIN:
            for key, length in entries:
                if length >= OPENAI_MIN:
                    self._openai[(machine, key)] = now + OPENAI_TTL_S
        self._count("openai", total, cached, 0)
        return total, cached

    def _chat_reply(self, body: dict[str, Any]) -> Reply:
        prompt, cached = self.openai_usage(body)
        base = {
            "id": f"chatcmpl-sim{self._ids:06d}",
            "object": "chat.completion.chunk",
            "created": 1727346168,
            "model": body.get("model", "gpt"),
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {**base, "choices": [choice]}

        tools = [t.get("function", t) for t in body.get("tools") or []]
        call = self._wants_tool(_chat_turn(body), tools)
        if call is not None:
            tool_call = {
                "index": 0,
                "id": f"call_sim{self._ids:06d}",
                "type": "function",
                "function": {"name": call, "arguments": json.dumps(self.tool_input)},
            }
            chunks = [
                chunk({"role": "assistant", "content": None, "tool_calls": [tool_call]}),
                chunk({}, "tool_calls"),
            ]
            out = 20
        else:
            chunks = [
                chunk({"role": "assistant", "content": self._answer(body)}),
                chunk({}, "stop"),
            ]
            out = self.answer_chars // 4
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": out,
            "total_tokens": prompt + out,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        chunks.append({**base, "choices": [], "usage": usage})
        text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return Reply(body=text)

    # --- answers ---------------------------------------------------------------------------

    def _wants_tool(self, turn: int | None, tools: list[dict[str, Any]]) -> str | None:
        """The tool to call, when the last message is the user's ``turn``-th text."""
        if turn is None or not tools or self.tool_every <= 0 or turn % self.tool_every:
            return None
        names = [str(t.get("name")) for t in tools]
        return self.tool_name if self.tool_name in names else names[0]

    def _answer(self, body: dict[str, Any]) -> str:
        seed = f"answer {self._ids} "
        return (seed * (self.answer_chars // len(seed) + 1))[: self.answer_chars]


def _anthropic_turn(body: dict[str, Any]) -> int | None:
    """The number of user text messages, when the last message is one (else None)."""
    messages = body.get("messages") or []
    if not messages or messages[-1].get("role") != "user":
        return None
    content = messages[-1].get("content")
    if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
        return None
    return sum(
        1
        for m in messages
        if m.get("role") == "user"
        and not (
            isinstance(m.get("content"), list)
            and any(b.get("type") == "tool_result" for b in m["content"])
        )
    )


def _chat_turn(body: dict[str, Any]) -> int | None:
    messages = body.get("messages") or []
    if not messages or messages[-1].get("role") != "user":
        return None
    return sum(1 for m in messages if m.get("role") == "user")
