"""What the Anthropic and OpenAI adapters share: environment, error classification,
redaction and message helpers.

Environment (read when a provider builds its client, not at import time):

* ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``: the ``anthropic:`` provider. Without a key
  the SDK's own lookup applies (``ANTHROPIC_AUTH_TOKEN``, profiles); failing that, a request
  fails with an ``auth`` error saying what to set.
* ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``: the ``openai:`` provider. With a base URL (an
  OpenAI-compatible server such as vLLM, Ollama or llama.cpp) the key is optional.
* ``TURNS_OPENAI_API``: ``chat`` (default) or ``responses``, the OpenAI API to speak.
* ``TURNS_OPENAI_PREFILL``: ``off`` (default), ``continue``, ``vllm`` or ``prefix``: how an
  OpenAI-compatible server continues a trailing assistant message, so that a step whose
  worker was lost goes on from the text it had streamed (``models.openai``).
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import math
import os
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic_core import to_json

from durable_turns.messages import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    StepStartPart,
    StreamPart,
    TextDelta,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from durable_turns.models.base import ErrorKind, ProviderError

CONTEXT_OVERFLOW = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length"
    r"|exceeds the maximum number of tokens|input token count|reduce the length of"
    r"|input is too long|too many (?:input )?tokens|context window",
    re.I,
)
"""Think's default context-overflow classifier (one regex for every provider)."""


def env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


# --- errors ------------------------------------------------------------------------------


def is_context_overflow(text: str) -> bool:
    return bool(CONTEXT_OVERFLOW.search(text))


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date),
    at most :data:`MAX_RETRY_AFTER_S`; None when neither says a number of seconds (a gateway
    sending ``nan``, ``inf`` or a date in the year 9999 is not waited on for ever)."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        with contextlib.suppress(ValueError):
            return _bounded(float(ms) / 1000)
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return _bounded(float(value))
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        try:
            return _bounded(email.utils.mktime_tz(parsed) - time.time())
        except (ValueError, OverflowError):  # a year past what the platform's clock holds
            return None


MAX_RETRY_AFTER_S = 600.0
"""A provider's ``retry-after`` longer than this waits this long (the step's own timeout is
10 minutes: a longer wait would only be spent waiting)."""


def _bounded(seconds: float) -> float | None:
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


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


def is_transport_error(error: BaseException) -> bool:
    """A network failure the SDK did not wrap (it does not while a stream is being read)."""
    module = type(error).__module__
    return module.startswith(("httpx", "httpcore", "h11", "anyio")) or isinstance(
        error, ConnectionError | TimeoutError
    )


def malformed_stream(provider: str, label: str, error: BaseException) -> ProviderError:
    """A response stream the provider's SDK, or the engine, could not read: bytes that are not
    UTF-8, JSON cut short, an event without its fields or with a field of the wrong type, a
    value that does not encode (a lone surrogate). Transient, as a dropped connection is: the
    step is retried (``TURNS_MODEL_RETRIES``) and the attempt's partial output dropped."""
    text = str(error)
    detail = text.splitlines()[0][:200] if text else ""
    return ProviderError(
        f"{label} sent a response stream the engine cannot read"
        f" ({type(error).__name__}{': ' + detail if detail else ''})",
        kind="transient",
        provider=provider,
    )


async def readable(parts: AsyncIterator[StreamPart]) -> AsyncIterator[StreamPart]:
    """``parts``, each checked to encode as JSON (they go on the chunk stream and into the
    store): a value from the provider that does not (a lone surrogate in a tool call's input
    or in provider metadata) fails here, as a malformed stream, not later in the engine.
    Text deltas are checked by their own model already."""
    async for part in parts:
        if not isinstance(part, TextDelta):
            to_json(part)
        yield part


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
