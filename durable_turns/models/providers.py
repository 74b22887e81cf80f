"""What the Anthropic and OpenAI adapters share: environment, error classification,
redaction and message helpers.

Environment (read when a provider builds its client, not at import time):

* ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``: the ``anthropic:`` provider. Without a key
  the SDK's own lookup applies (``ANTHROPIC_AUTH_TOKEN``, profiles); failing that, a request
  fails with an ``auth`` error saying what to set.
* ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``: the ``openai:`` provider. With a base URL (an
  OpenAI-compatible server such as vLLM, Ollama or llama.cpp) the key is optional.
* ``TURNS_OPENAI_API``: ``chat`` (default) or ``responses``, the OpenAI API to speak.
"""

from __future__ import annotations

import base64
import email.utils
import functools
import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from durable_turns.messages import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from durable_turns.models.base import ErrorKind

CONTEXT_OVERFLOW = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length"
    r"|exceeds the maximum number of tokens|input token count|reduce the length of"
    r"|input is too long|too many (?:input )?tokens|context window",
    re.I,
)
"""Think's default context-overflow classifier (one regex for every provider)."""

_SECRET = re.compile(r"\b(sk-[A-Za-z0-9_\-]{6})[A-Za-z0-9_\-*]{6,}")


def env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


# --- errors ------------------------------------------------------------------------------


def is_context_overflow(text: str) -> bool:
    return bool(CONTEXT_OVERFLOW.search(text))


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(float(ms) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return max(email.utils.mktime_tz(parsed) - time.time(), 0.0)


def should_retry_header(headers: Mapping[str, str] | None) -> bool | None:
    """The server's own verdict (``x-should-retry: true|false``), when it gives one."""
    value = (headers or {}).get("x-should-retry")
    return {"true": True, "false": False}.get((value or "").lower())


def kind_for_status(status: int) -> ErrorKind:
    """The default kind of an HTTP error status (before provider-specific rules)."""
    if status in (401, 403):
        return "auth"
    if status in (408, 409, 429) or status >= 500:
        return "transient"
    return "invalid_request"


SECRET_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY")
"""Whose values are masked wherever a provider error's text goes."""
MIN_SECRET = 8
_known: set[str] = set()
"""Keys handed to ``redact`` (a provider's own key): masked in every later error too."""


def secret_variants(secret: str) -> set[str]:
    """How a key can show up in text: verbatim, base64 and URL-safe base64 (padded or not,
    also inside a longer encoded text such as ``user:key``), in any letter case (matched
    case-insensitively)."""
    raw = secret.encode()
    variants = {secret}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        encoded = encode(raw).decode()
        variants |= {encoded, encoded.rstrip("=")}
        # inside a longer encoded text (``Basic base64(user:key)``): the key's bytes at any
        # offset modulo 3, without the characters its neighbours share
        for offset, skip in ((0, 0), (1, 2), (2, 3)):
            variants.add(encode(b"\0" * offset + raw).decode().rstrip("=")[skip:-3])
    return {v for v in variants if len(v) >= MIN_SECRET}


@functools.lru_cache(maxsize=16)
def _secrets_pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    variants = {v for s in secrets for v in secret_variants(s)}
    if not variants:
        return None
    alternatives = sorted((re.escape(v) for v in variants), key=len, reverse=True)
    return re.compile("|".join(alternatives), re.I)


def configured_secrets() -> frozenset[str]:
    """The provider keys of this process: its key variables and the keys providers use."""
    from_env = {v for name in SECRET_VARIABLES if (v := os.environ.get(name))}
    return frozenset(s for s in from_env | _known if len(s) >= MIN_SECRET)


def redact(text: str, *secrets: str | None) -> str:
    """Mask API keys in ``text``: the configured keys (and ``secrets``), their base64 forms
    and case variants, and anything shaped like ``sk-…``. Apply it to the *final* message."""
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET:
            _known.add(secret)
    for secret in secrets:  # short keys a caller passes explicitly: verbatim only
        if secret and 4 <= len(secret) < MIN_SECRET:
            text = text.replace(secret, "***")
    pattern = _secrets_pattern(configured_secrets())
    if pattern is not None:
        text = pattern.sub("***", text)
    return _SECRET.sub(r"\1***", text)


def is_transport_error(error: BaseException) -> bool:
    """A network failure the SDK did not wrap (it does not while a stream is being read)."""
    module = type(error).__module__
    return module.startswith(("httpx", "httpcore", "h11", "anyio")) or isinstance(
        error, ConnectionError | TimeoutError
    )


# --- messages ----------------------------------------------------------------------------


def split_steps(parts: list[Part]) -> list[list[Part]]:
    """An assistant message's parts, one list per model step (``step-start`` separates them)."""
    steps: list[list[Part]] = [[]]
    for part in parts:
        if isinstance(part, StepStartPart):
            if steps[-1]:
                steps.append([])
        else:
            steps[-1].append(part)
    return [s for s in steps if s]


def tool_output_text(output: Any) -> str:
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def tool_input_json(value: Any) -> str:
    """Tool-call arguments as JSON text; a call recorded with unparseable input keeps its text."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def missing_result(call: ToolCallPart) -> ToolResultPart:
    """Stands in for a result that was never recorded: both APIs reject unanswered calls."""
    return ToolResultPart(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        output="No result was recorded for this tool call.",
        is_error=True,
    )


def step_results(step: list[Part]) -> list[ToolResultPart]:
    """The step's tool results in call order, with a stand-in for each call left unanswered."""
    results = {p.tool_call_id: p for p in step if isinstance(p, ToolResultPart)}
    ordered = [
        results.pop(c.tool_call_id) if c.tool_call_id in results else missing_result(c)
        for c in _calls(step)
    ]
    return ordered + list(results.values())


def _calls(step: list[Part]) -> list[ToolCallPart]:
    return [p for p in step if isinstance(p, ToolCallPart)]


def data_url(part: FilePart) -> str:
    return part.url or f"data:{part.media_type};base64,{part.data or ''}"


# --- token estimates ---------------------------------------------------------------------

FILE_TOKENS = 1000
"""A flat guess per attached file: its base64 length says little about its token cost."""
MESSAGE_OVERHEAD = 4


def estimate_tokens(system: str, messages: list[Message], chars_per_token: float) -> int:
    """A local estimate from the text the model reads (not the JSON wrapping around it)."""
    chars = len(system)
    files = 0
    for message in messages:
        for part in message.parts:
            match part:
                case TextPart(text=text):
                    chars += len(text)
                case ReasoningPart(text=text):
                    chars += len(text)
                case ToolCallPart():
                    chars += len(part.tool_name) + len(tool_input_json(part.input))
                case ToolResultPart():
                    chars += len(tool_output_text(part.output))
                case FilePart():
                    files += 1
    overhead = MESSAGE_OVERHEAD * len(messages)
    return int(chars / chars_per_token) + files * FILE_TOKENS + overhead
