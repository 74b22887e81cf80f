"""The ``anthropic:`` provider: Claude through the official SDK's Messages API, streamed.

Why it is shaped like this:

* SDK retries are off (``max_retries=0``): every failure becomes a ``ProviderError`` and
  Temporal retries the activity, so each attempt shows in history. ``retry-after-ms`` /
  ``retry-after`` become ``retry_after``; ``x-should-retry`` overrides the status's verdict.
* The client is built on the first request, so a worker without a key still starts.
* The body is a plain dict: model, messages and ``max_tokens`` go as arguments, the rest
  through ``extra_body``. Fields the installed SDK does not know (2.x dropped
  ``temperature``; older ones lack ``output_config``) still reach the API, and
  ``provider_options`` can set any field (``{"thinking": {...}}``; options under an
  ``"anthropic"`` key apply to this provider only, ``"openai"`` ones are left out).
* Raw stream events (``messages.create(stream=True)``) rather than the SDK's accumulating
  helper: the engine accumulates, and must see signatures and redacted thinking as they come.
* Usage: ``input_tokens`` is the whole prompt (uncached + cache writes + cache reads), as
  OpenAI counts it, so context-window arithmetic is the same for every provider; the split is
  in ``cached_input_tokens`` / ``cache_creation_input_tokens`` and ``provider_metadata``.
  ``message_delta`` usage is cumulative, so its values replace ``message_start``'s.
* Structured output (``output_schema``): the native ``output_config.format`` JSON schema by
  default (Claude Sonnet 4.5, Opus 4.1, Haiku 4.5 and later). For older models set
  ``provider_options={"structured_output": "tool"}``: a forced ``json_output`` tool whose
  input streams as the step's text. The engine validates the JSON, not this module.
* Thinking goes back to the API only when it carries a signature or redacted data: the API
  rejects unsigned thinking (for example reasoning another provider produced).
* Server-side tools (``server_tool_use`` and their results) run at Anthropic; their blocks
  are skipped, never turned into tool calls for the engine to run.

Why it is long (about 580 lines): its request body, message mapping, stream parser and
error mapping belong to one wire API and are read together, as in ``openai.py``.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anthropic

from durable_turns.messages import (
    FilePart,
    FinishChunk,
    FinishReason,
    Message,
    Part,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningPart,
    StreamPart,
    TextDelta,
    TextPart,
    ToolCallChunk,
    ToolCallPart,
    ToolInputDelta,
    ToolInputStart,
    ToolResultPart,
    Usage,
)
from durable_turns.models.base import (
    ErrorKind,
    ModelProvider,
    ModelRequest,
    ProviderError,
    parse_tool_input,
)
from durable_turns.models.caching import effective_cache, place_anthropic_breakpoints, stable_tools
from durable_turns.models.providers import (
    env,
    estimate_tokens,
    is_context_overflow,
    is_transport_error,
    kind_for_status,
    malformed_stream,
    readable,
    retry_after,
    should_retry_header,
    split_steps,
    step_results,
    tool_output_text,
)
from durable_turns.redaction import redact

DEFAULT_MAX_TOKENS = 4096
"""The API requires ``max_tokens``; used when the turn sets no ``max_output_tokens``."""
JSON_TOOL = "json_output"
CHARS_PER_TOKEN = 3.5
"""Claude's tokenizer yields fewer characters per token than OpenAI's: estimate on the high side."""

FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content-filter",
}
# An error event inside a 200 stream has no status of its own: use the one its type maps to.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class AnthropicProvider(ModelProvider):
    name = "anthropic"
    continues_prefill = True

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 600.0,
    ) -> None:
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self._client: anthropic.AsyncAnthropic | None = None

    def _get_client(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            self._api_key = self._api_key or env("ANTHROPIC_API_KEY")
            self._client = anthropic.AsyncAnthropic(
                api_key=self._api_key,
                base_url=self._base_url or env("ANTHROPIC_BASE_URL"),
                timeout=self._timeout,
                max_retries=0,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def continues(self, request: ModelRequest) -> bool:
        """A prefill (a last assistant message the model goes on from) is refused with
        extended thinking, and cannot be honoured with a forced tool or structured output;
        it needs the conversation to end with a user message."""
        body, _, _, _ = build_body(request.model_copy(update={"continue_text": ""}))
        thinking = body.get("thinking")
        choice = body.get("tool_choice")
        return (
            not (isinstance(thinking, dict) and thinking.get("type", "disabled") != "disabled")
            and request.output_schema is None
            and (not isinstance(choice, dict) or choice.get("type") in ("auto", "none"))
            and bool(body["messages"])
            and body["messages"][-1]["role"] == "user"
        )

    def count_tokens(self, system: str, messages: list[Message]) -> int:
        """A local estimate (~3.5 characters a token); the count_tokens API is a network call."""
        return estimate_tokens(system, messages, CHARS_PER_TOKEN)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        body, headers, json_tool, warnings = build_body(request)
        messages = body.pop("messages")
        max_tokens = body.pop("max_tokens")
        events: Any = None
        try:
            client = self._get_client()
            events = await client.messages.create(
                model=request.model,
                max_tokens=max_tokens,
                messages=messages,
                stream=True,
                extra_body=body,
                extra_headers=headers or None,
            )
            parts = stream_parts(events, json_tool=json_tool, warnings=warnings)
            async for part in readable(parts):
                yield part
        except ProviderError:
            raise
        except anthropic.AnthropicError as e:
            # ``from None``: the SDK error's text is not redacted, and Temporal would ship it.
            raise map_error(e, secret=self._api_key) from None
        except Exception as e:
            if is_transport_error(e) or (
                isinstance(e, TypeError) and "authentication" in str(e).lower()
            ):
                raise map_error(e, secret=self._api_key) from None
            if events is None:
                raise  # before the response: the request could not be made
            # what came could not be read (not UTF-8, JSON cut short, a field missing or of
            # the wrong type): the provider's failure, typed, never a stray exception
            raise malformed_stream("anthropic", "Anthropic", e) from None
        finally:
            if events is not None:
                await events.close()


# --- request -----------------------------------------------------------------------------


def build_body(
    request: ModelRequest,
) -> tuple[dict[str, Any], dict[str, str], str | None, list[str]]:
    """(body, extra headers, the structured-output tool's name or None, warnings)."""
    options = dict(request.provider_options)
    scoped = options.pop("anthropic", None)
    options.pop("openai", None)
    options.pop("api", None)  # the OpenAI provider's API switch, not a body field
    if isinstance(scoped, dict):
        options.update(scoped)
    cache = effective_cache(request.cache, options)
    mode = options.pop("structured_output", "native")
    warnings: list[str] = []

    extra_system, messages = to_anthropic_messages(
        request.messages, send_reasoning=request.send_reasoning
    )
    body: dict[str, Any] = {
        "messages": messages,
        "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
    }
    system = "\n\n".join(s for s in [request.system, *extra_system] if s)
    if system:
        body["system"] = [{"type": "text", "text": system}]
    for key in ("temperature", "top_p", "top_k"):
        if getattr(request, key) is not None:
            body[key] = getattr(request, key)
    if request.stop_sequences:
        body["stop_sequences"] = request.stop_sequences
    for key in ("presence_penalty", "frequency_penalty", "seed"):
        if getattr(request, key) is not None:
            warnings.append(f"{key} is not supported by the Anthropic API; it was ignored")

    tools = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in stable_tools(request.tools)
    ]
    tool_choice = _tool_choice(request.tool_choice) if tools else None
    json_tool = None
    if request.output_schema is not None:
        if mode == "tool":
            json_tool = JSON_TOOL
            tools.append(
                {
                    "name": JSON_TOOL,
                    "description": "Give the final answer as JSON matching this schema.",
                    "input_schema": request.output_schema,
                }
            )
            tool_choice = {"type": "any"} if request.tools else {"type": "tool", "name": JSON_TOOL}
        else:
            body["output_config"] = {
                "format": {"type": "json_schema", "schema": request.output_schema}
            }
    if tools:
        body["tools"] = tools
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    body.update(options)
    place_anthropic_breakpoints(
        body, cache, system_only=request.cached_prompt and not cache.enabled
    )
    if request.continue_text:  # after the breakpoints: the cached prefix is unchanged
        # the API refuses a final assistant text that ends in white space
        prefill = {"type": "text", "text": request.continue_text.rstrip()}
        messages.append({"role": "assistant", "content": [prefill]})
    return body, dict(request.headers), json_tool, warnings


def _tool_choice(choice: Any) -> dict[str, Any] | None:
    if choice is None:
        return None
    if isinstance(choice, dict):
        return {"type": "tool", "name": choice.get("tool_name") or choice.get("name")}
    return {"type": {"required": "any"}.get(choice, choice)}


def to_anthropic_messages(
    messages: list[Message], *, send_reasoning: bool = True
) -> tuple[list[str], list[dict[str, Any]]]:
    """(system texts found among the messages, Anthropic messages).

    Each step of an assistant message becomes an assistant message (thinking, text, tool
    uses) followed by a user message of its tool results; same-role neighbours are merged.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            system.append(message.text)
        elif message.role == "user":
            content = [b for p in message.parts if (b := _user_block(p)) is not None]
            out.append({"role": "user", "content": content})
        else:
            for step in split_steps(message.parts):
                blocks = _assistant_blocks(step, send_reasoning)
                if blocks:
                    out.append({"role": "assistant", "content": blocks})
                results = [_tool_result(r) for r in step_results(step)]
                if results:
                    out.append({"role": "user", "content": results})
    merged: list[dict[str, Any]] = []
    for item in out:
        if not item["content"]:
            continue
        if merged and merged[-1]["role"] == item["role"]:
            merged[-1]["content"] = merged[-1]["content"] + item["content"]
        else:
            merged.append(item)
    return system, merged


def _user_block(part: Part) -> dict[str, Any] | None:
    match part:
        case TextPart(text=text):
            return {"type": "text", "text": text} if text else None
        case FilePart():
            return _file_block(part)
        case ToolResultPart():
            return _tool_result(part)
    return None


def _file_block(part: FilePart) -> dict[str, Any]:
    kind = "image" if part.media_type.startswith("image/") else "document"
    if part.url:
        return {"type": kind, "source": {"type": "url", "url": part.url}}
    if part.media_type.startswith("text/"):
        text = base64.b64decode(part.data or "").decode("utf-8", "replace")
        return {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": text},
        }
    source = {"type": "base64", "media_type": part.media_type, "data": part.data or ""}
    return {"type": kind, "source": source}


def _tool_result(part: ToolResultPart) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": part.tool_call_id,
        "content": tool_output_text(part.output),
    }
    if part.is_error:
        block["is_error"] = True
    return block


def _assistant_blocks(step: list[Part], send_reasoning: bool) -> list[dict[str, Any]]:
    thinking: list[dict[str, Any]] = []
    text: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for part in step:
        match part:
            case ReasoningPart() if send_reasoning:
                if part.redacted_data:
                    thinking.append({"type": "redacted_thinking", "data": part.redacted_data})
                elif part.signature:
                    thinking.append(
                        {"type": "thinking", "thinking": part.text, "signature": part.signature}
                    )
            case TextPart() if part.text:
                text.append({"type": "text", "text": part.text})
            case ToolCallPart():
                value = part.input if isinstance(part.input, dict) else {"_raw_input": part.input}
                calls.append(
                    {
                        "type": "tool_use",
                        "id": part.tool_call_id,
                        "name": part.tool_name,
                        "input": value,
                    }
                )
    return thinking + text + calls


# --- stream ------------------------------------------------------------------------------


@dataclass
class _Block:
    kind: str
    """text, thinking, redacted_thinking, tool_use, json (the structured-output tool), skip"""
    call_id: str = ""
    name: str = ""
    json: list[str] = field(default_factory=list)


async def stream_parts(
    events: AsyncIterator[Any], *, json_tool: str | None = None, warnings: list[str] | None = None
) -> AsyncIterator[StreamPart]:
    """Raw Messages stream events → stream parts, ending with one ``FinishChunk``."""
    blocks: dict[int, _Block] = {}
    usage: dict[str, int] = {}
    thinking_tokens = 0
    response: dict[str, Any] = {}
    stop_reason: str | None = None
    stop_sequence: str | None = None
    ended = False
    called = False
    async for event in events:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            message = event.message
            response = {"id": message.id, "model": message.model}
            usage = _usage_fields(message.usage, usage)
        elif kind == "content_block_start":
            block = event.content_block
            btype = getattr(block, "type", "")
            if btype == "tool_use" and block.name == json_tool:
                blocks[event.index] = _Block("json")
            elif btype == "tool_use":
                blocks[event.index] = _Block("tool_use", block.id, block.name)
                yield ToolInputStart(tool_call_id=block.id, tool_name=block.name)
            elif btype == "redacted_thinking":
                blocks[event.index] = _Block("redacted_thinking")
                yield ReasoningDelta(redacted_data=block.data)
            elif btype in ("text", "thinking"):
                blocks[event.index] = _Block(btype)
                initial = getattr(block, btype, "")
                if initial:
                    yield (
                        TextDelta(text=initial) if btype == "text" else ReasoningDelta(text=initial)
                    )
            else:
                blocks[event.index] = _Block("skip")
        elif kind == "content_block_delta":
            current = blocks.get(event.index) or _Block("skip")
            delta = event.delta
            dtype = getattr(delta, "type", "")
            if current.kind == "skip":
                continue
            if dtype == "text_delta" and delta.text:
                yield TextDelta(text=delta.text)
            elif dtype == "thinking_delta" and delta.thinking:
                yield ReasoningDelta(text=delta.thinking)
            elif dtype == "signature_delta" and delta.signature:
                yield ReasoningDelta(signature=delta.signature)
            elif dtype == "input_json_delta" and delta.partial_json:
                current.json.append(delta.partial_json)
                if current.kind == "json":
                    yield TextDelta(text=delta.partial_json)
                else:
                    yield ToolInputDelta(tool_call_id=current.call_id, delta=delta.partial_json)
        elif kind == "content_block_stop":
            if event.index in blocks:
                for part in _close(blocks.pop(event.index)):
                    called = called or isinstance(part, ToolCallChunk)
                    yield part
        elif kind == "message_delta":
            stop_reason = event.delta.stop_reason or stop_reason
            stop_sequence = getattr(event.delta, "stop_sequence", None) or stop_sequence
            usage = _usage_fields(event.usage, usage)
            details = getattr(event.usage, "output_tokens_details", None)
            thinking_tokens = getattr(details, "thinking_tokens", None) or thinking_tokens
        elif kind == "message_stop":
            ended = True
    if not ended and stop_reason is None:
        raise ProviderError(
            "Anthropic stream ended before message_stop (connection dropped?)",
            kind="transient",
            provider="anthropic",
        )
    # Blocks left open (the output hit max_tokens mid-block) are closed as they stand.
    for index in sorted(blocks):
        for part in _close(blocks[index]):
            called = called or isinstance(part, ToolCallChunk)
            yield part

    cache_read = usage.get("cache_read_input_tokens", 0)
    cache_write = usage.get("cache_creation_input_tokens", 0)
    prompt = usage.get("input_tokens", 0) + cache_read + cache_write
    output = usage.get("output_tokens", 0)
    finish = FINISH.get(stop_reason or "", "other")
    if finish == "tool-calls" and not called:
        finish = "stop"  # only the structured-output tool was called
    metadata: dict[str, Any] = {
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
    }
    if stop_sequence:
        metadata["stop_sequence"] = stop_sequence
    yield FinishChunk(
        finish_reason=finish,
        raw_finish_reason=stop_reason,
        usage=Usage(
            input_tokens=prompt,
            output_tokens=output,
            total_tokens=prompt + output,
            reasoning_tokens=thinking_tokens,
            cached_input_tokens=cache_read,
            cache_creation_input_tokens=cache_write,
        ),
        provider_metadata={"anthropic": metadata},
        response=response,
        warnings=list(warnings or []),
    )


def _close(block: _Block) -> list[StreamPart]:
    if block.kind in ("thinking", "redacted_thinking"):
        return [ReasoningEnd()]
    if block.kind == "tool_use":
        value, error = parse_tool_input("".join(block.json))
        return [
            ToolCallChunk(
                tool_call_id=block.call_id, tool_name=block.name, input=value, input_error=error
            )
        ]
    return []


_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def _usage_fields(usage: Any, previous: dict[str, int]) -> dict[str, int]:
    """Later usage replaces earlier (message_delta's is cumulative); absent fields keep theirs."""
    merged = dict(previous)
    for key in _USAGE_KEYS:
        value = getattr(usage, key, None)
        if value is not None:
            merged[key] = value
    return merged


# --- errors ------------------------------------------------------------------------------


def map_error(error: BaseException, *, secret: str | None = None) -> ProviderError:
    """An SDK or transport exception → a ``ProviderError`` a person (and Temporal) can act on."""
    if isinstance(error, anthropic.APIStatusError):
        return _status_error(error, secret)
    if isinstance(error, anthropic.APIConnectionError) or is_transport_error(error):
        what = "timed out" if "timeout" in type(error).__name__.lower() else "failed"
        return ProviderError(
            f"Anthropic connection {what}: {type(error).__name__}",
            kind="transient",
            provider="anthropic",
        )
    text = redact(str(error), secret)
    if "auth" in text.lower() or "credential" in text.lower() or "api_key" in text.lower():
        return ProviderError(
            f"No Anthropic credentials: set ANTHROPIC_API_KEY ({text})",
            kind="auth",
            provider="anthropic",
        )
    return ProviderError(f"Anthropic error: {text}", kind="fatal", provider="anthropic")


def _status_error(error: anthropic.APIStatusError, secret: str | None) -> ProviderError:
    body: dict[str, Any] = error.body if isinstance(error.body, dict) else {}
    detail: dict[str, Any] = body["error"] if isinstance(body.get("error"), dict) else {}
    err_type = str(detail.get("type") or "")
    message = redact(str(detail.get("message") or error.message), secret)
    status = error.status_code
    if status < 400:  # an error event inside a streamed 200 response
        status = ERROR_STATUS.get(err_type, 500)
    headers = error.response.headers
    request_id = headers.get("request-id") or body.get("request_id")
    where = f" [request {request_id}]" if request_id else ""

    kind: ErrorKind = kind_for_status(status)
    verdict = should_retry_header(headers)
    if verdict is not None and kind in ("transient", "invalid_request"):
        kind = "transient" if verdict else "fatal"
    if status in (400, 413) and is_context_overflow(message):
        kind = "context_overflow"
    if status == 401:
        text = (
            f"Anthropic rejected the API key (401): set ANTHROPIC_API_KEY to a valid key. {message}"
        )
    elif status == 403:
        text = (
            f"Anthropic denied access (403): the API key may lack access to this model. {message}"
        )
    elif err_type == "billing_error" or status == 402:
        kind = "fatal"
        text = (
            f"Anthropic billing error ({status}): check the account's plan and credits. {message}"
        )
    else:
        label = f" {err_type}" if err_type else ""
        text = f"Anthropic API error {status}{label}: {message}"
    return ProviderError(
        text + where,
        kind=kind,
        status=status,
        retry_after=retry_after(headers) if kind == "transient" else None,
        provider="anthropic",
    )
