"""The ``openai:`` provider: OpenAI (and OpenAI-compatible servers) through the official SDK.

Two wire APIs, both streamed:

* Chat Completions (the default): what OpenAI-compatible servers (vLLM, Ollama, llama.cpp,
  LM Studio, OpenRouter…) speak, so ``OPENAI_BASE_URL`` alone points a worker at one.
  Usage comes from ``stream_options.include_usage``; ``reasoning_content`` / ``reasoning``
  deltas (DeepSeek, vLLM, Ollama) become reasoning.
* Responses: OpenAI's newer API, needed for reasoning summaries and some models. Choose it
  per model id (``openai:gpt-5@responses``), per turn (``provider_options={"api":
  "responses"}``) or per worker (``TURNS_OPENAI_API=responses``), first match wins.

Why it is shaped like this:

* SDK retries are off (``max_retries=0``): every failure becomes a ``ProviderError`` and
  Temporal retries the activity. ``retry-after-ms`` / ``retry-after`` become ``retry_after``
  and ``x-should-retry`` overrides the status's verdict. ``insufficient_quota`` (a 429) is
  not transient: no retry buys credit.
* The client is built on the first request, so a worker without a key still starts. With a
  custom base URL and no ``OPENAI_API_KEY``, a placeholder key is sent (local servers ignore it).
* The body is a plain dict: model and messages/input go as arguments, the rest through
  ``extra_body``, so fields the installed SDK does not know still reach the server, and
  ``provider_options`` can set any field (options under an ``"openai"`` key apply to this
  provider only, ``"anthropic"`` ones are left out).
* ``max_output_tokens`` is sent as ``max_completion_tokens`` to OpenAI (o-series models
  reject ``max_tokens``) and as ``max_tokens`` to a custom base URL (what servers accept).
* Structured output is native: ``response_format`` json_schema (Chat), ``text.format``
  (Responses), with ``strict: false`` so any schema is accepted; the engine validates.
* A step whose worker was lost goes on from the text it had streamed only where the server
  continues a trailing assistant message, which OpenAI's own API does not: the ``prefill``
  setting says how this server does it (``continue``: the message as it is, llama.cpp's
  llama-server, Ollama, OpenRouter; ``vllm``: with ``continue_final_message``; ``prefix``:
  the message marked ``"prefix": true``, DeepSeek and Mistral), per turn
  (``provider_options={"openai": {"prefill": "vllm"}}``) or per worker
  (``TURNS_OPENAI_PREFILL``); ``off`` by default, ignored for api.openai.com, and Chat
  Completions only (the Responses API has no prefill: its step starts again). A server
  that streams the prefill back first (Mistral) has it left out (``_without_echo``).
* Reasoning: Chat Completions takes no reasoning back, so it is not sent. A Responses
  reasoning item is kept on its reasoning parts (``provider_metadata["openai"]``:
  ``item_id``, and ``encrypted_content`` when the response has it) and sent back, with its
  summary, before the text and calls that followed it, within the turn (as OpenAI asks).
  Reasoning without an item id (Anthropic thinking after a model switch, Chat Completions
  reasoning) is not sent. The
  requests are stateless but ``store`` is the API's default (true), so the id is enough;
  with ``store: false`` only items with encrypted content can go back, and
  ``include: ["reasoning.encrypted_content"]`` is added for you only when ``reasoning`` is
  configured too (non-reasoning models reject it): otherwise add it to the options.

Why it is long (about 900 lines): two wire APIs, each with its request body, its message
mapping and its stream parser, and the errors they share, in marked sections; kept in one
module, as ``anthropic.py`` keeps its one API, so a provider is read in one place.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import openai

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
from durable_turns.models.caching import effective_cache, openai_cache_fields, stable_tools
from durable_turns.models.providers import (
    data_url,
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
    tool_input_json,
    tool_output_text,
)
from durable_turns.redaction import redact

PLACEHOLDER_KEY = "sk-no-key-required"
CHARS_PER_TOKEN = 4.0
APIS = ("chat", "responses")
PREFILLS = ("off", "continue", "vllm", "prefix")
"""How a server continues a trailing assistant message (``OpenAIProvider.prefill_for``)."""
ENCRYPTED = "reasoning.encrypted_content"

CHAT_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "length": "length",
    "content_filter": "content-filter",
}
TRANSIENT_CODES = {"server_error", "rate_limit_exceeded", "server_is_overloaded", "slow_down"}


class OpenAIProvider(ModelProvider):
    """Streams a step through Chat Completions or Responses. ``continues_prefill`` stays
    False: whether a step can go on from a prefill is the server's (``prefill_for``), so
    ``continues`` decides per request."""

    name = "openai"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        api: str | None = None,
        prefill: str | None = None,
        timeout: float = 600.0,
    ) -> None:
        self._api_key = api_key
        self._base_url = base_url
        self._api = api
        self._prefill = prefill
        self._timeout = timeout
        self._client: openai.AsyncOpenAI | None = None

    def _get_client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._base_url = self._base_url or env("OPENAI_BASE_URL")
            self._api_key = self._api_key or env("OPENAI_API_KEY")
            if self._api_key is None and self._base_url is None:
                raise ProviderError(
                    "No OpenAI API key: set OPENAI_API_KEY (or OPENAI_BASE_URL for an"
                    " OpenAI-compatible server)",
                    kind="auth",
                    provider="openai",
                )
            self._client = openai.AsyncOpenAI(
                api_key=self._api_key or PLACEHOLDER_KEY,
                base_url=self._base_url,
                timeout=self._timeout,
                max_retries=0,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def count_tokens(self, system: str, messages: list[Message]) -> int:
        """A local estimate (~4 characters a token, OpenAI's rule of thumb for English)."""
        return estimate_tokens(system, messages, CHARS_PER_TOKEN)

    def api_for(self, request: ModelRequest) -> tuple[str, str]:
        """(the API to use, the model name without an ``@chat``/``@responses`` suffix)."""
        model, _, suffix = request.model.rpartition("@")
        if suffix in APIS and model:
            return suffix, model
        chosen = request.provider_options.get("api") or self._api or env("TURNS_OPENAI_API")
        chosen = chosen or "chat"
        if chosen not in APIS:
            raise ProviderError(
                f"unknown OpenAI API {chosen!r}: use 'chat' or 'responses'",
                kind="invalid_request",
                provider="openai",
            )
        return chosen, request.model

    def prefill_for(self, request: ModelRequest) -> str:
        """How the server continues a trailing assistant message (one of ``PREFILLS``): the
        turn's ``provider_options["openai"]["prefill"]``, else the provider's ``prefill``,
        else ``TURNS_OPENAI_PREFILL``, else ``off``."""
        scoped = request.provider_options.get("openai")
        chosen = scoped.get("prefill") if isinstance(scoped, dict) else None
        chosen = chosen or self._prefill or env("TURNS_OPENAI_PREFILL") or "off"
        if chosen not in PREFILLS:
            raise ProviderError(
                f"unknown OpenAI prefill {chosen!r}: use one of {', '.join(PREFILLS)}",
                kind="invalid_request",
                provider="openai",
            )
        return str(chosen)

    def _custom_server(self) -> bool:
        """Whether the base URL is an OpenAI-compatible server rather than OpenAI itself."""
        base_url = self._base_url or env("OPENAI_BASE_URL")
        return base_url is not None and "api.openai.com" not in base_url

    def continues(self, request: ModelRequest) -> bool:
        """A prefill needs the Chat Completions API, a ``prefill`` setting other than ``off``
        and a compatible server (OpenAI's own API has none), and, as Anthropic's, no forced
        tool, no structured output, no reasoning settings (llama.cpp refuses a prefill with
        thinking on) and a conversation that ends with the user or a tool result."""
        try:
            api, _ = self.api_for(request)
            style = self.prefill_for(request)
        except ProviderError:
            return False  # the request itself says what is wrong
        if api != "chat" or style == "off" or not self._custom_server():
            return False
        plain = request.model_copy(update={"continue_text": ""})
        body, _ = chat_body(plain, custom_server=True)
        choice = body.get("tool_choice")
        template = body.get("chat_template_kwargs")
        thinking = any(key in body for key in ("reasoning_effort", "reasoning", "thinking")) or (
            isinstance(template, dict) and bool(template.get("enable_thinking"))
        )
        return (
            "response_format" not in body
            and (choice is None or choice in ("auto", "none"))
            and not thinking
            and bool(body["messages"])
            and body["messages"][-1]["role"] in ("user", "tool")
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        api, model = self.api_for(request)
        prefill = self.prefill_for(request)
        events: Any = None
        try:
            client = self._get_client()
            custom = self._custom_server()
            if api == "chat":
                body, warnings = chat_body(request, custom_server=custom, prefill=prefill)
                messages = body.pop("messages")
                events = await client.chat.completions.create(
                    model=model,
                    messages=messages,
                    stream=True,
                    extra_body=body,
                    extra_headers=dict(request.headers) or None,
                )
                parts = chat_parts(events, warnings)
                if request.continue_text and prefill != "off":
                    parts = _without_echo(parts, request.continue_text.rstrip())
            else:
                body, warnings = responses_body(request)
                items = body.pop("input")
                events = await client.responses.create(
                    model=model,
                    input=items,
                    stream=True,
                    extra_body=body,
                    extra_headers=dict(request.headers) or None,
                )
                parts = responses_parts(events, warnings)
            async for part in readable(parts):
                yield part
        except ProviderError:
            raise
        except openai.OpenAIError as e:
            # ``from None``: the SDK error's text is not redacted, and Temporal would ship it.
            raise map_error(e, secret=self._api_key) from None
        except Exception as e:
            if is_transport_error(e):
                raise map_error(e, secret=self._api_key) from None
            if events is None:
                raise  # before the response: the request could not be made
            # what came could not be read (not UTF-8, JSON cut short, a field missing or of
            # the wrong type): the provider's failure, typed, never a stray exception
            raise malformed_stream("openai", "OpenAI", e) from None
        finally:
            if events is not None:
                await events.close()


# --- requests ----------------------------------------------------------------------------


def _options(request: ModelRequest) -> dict[str, Any]:
    options = dict(request.provider_options)
    options.pop("api", None)
    options.pop("anthropic", None)
    options.pop("structured_output", None)  # the Anthropic provider's switch, not a body field
    scoped = options.pop("openai", None)
    if isinstance(scoped, dict):  # its ``prefill`` is this provider's setting, not a field
        options.update({k: v for k, v in scoped.items() if k != "prefill"})
    return options


def _cached(request: ModelRequest) -> dict[str, Any]:
    """The provider options, with ``prompt_cache_key`` first unless caching is off."""
    options = _options(request)
    cache = effective_cache(request.cache, options)
    return {**openai_cache_fields(cache, request.conversation_id, options), **options}


def _unsupported(request: ModelRequest, keys: tuple[str, ...], api: str) -> list[str]:
    return [
        f"{key} is not supported by the OpenAI {api} API; it was ignored"
        for key in keys
        if getattr(request, key) is not None
    ]


def chat_body(
    request: ModelRequest, *, custom_server: bool, prefill: str = "off"
) -> tuple[dict[str, Any], list[str]]:
    """The Chat Completions body (without model and stream) and warnings. A
    ``continue_text`` goes last, as an assistant message in the server's ``prefill`` style."""
    body: dict[str, Any] = {
        "messages": to_chat_messages(request.system, request.messages),
        "stream_options": {"include_usage": True},
    }
    if request.max_output_tokens is not None:
        key = "max_tokens" if custom_server else "max_completion_tokens"
        body[key] = request.max_output_tokens
    for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "seed"):
        if getattr(request, key) is not None:
            body[key] = getattr(request, key)
    warnings: list[str] = []
    if request.top_k is not None and custom_server:
        body["top_k"] = request.top_k  # vLLM, llama.cpp and Ollama's OpenAI API accept it
    else:
        warnings += _unsupported(request, ("top_k",), "Chat Completions")
    if request.stop_sequences:
        body["stop"] = request.stop_sequences
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in stable_tools(request.tools)
        ]
        if request.tool_choice is not None:
            choice = request.tool_choice
            if isinstance(choice, dict):
                name = choice.get("tool_name") or choice.get("name")
                body["tool_choice"] = {"type": "function", "function": {"name": name}}
            else:
                body["tool_choice"] = choice
    if request.output_schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": request.output_schema, "strict": False},
        }
    body.update(_cached(request))
    if request.continue_text and prefill != "off":
        # without trailing white space, as for Anthropic: the model goes on from a word
        message: dict[str, Any] = {"role": "assistant", "content": request.continue_text.rstrip()}
        if prefill == "prefix":
            message["prefix"] = True  # DeepSeek, Mistral
        elif prefill == "vllm":  # the template leaves the message open, with no new turn
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        body["messages"].append(message)
    return body, warnings


def responses_body(request: ModelRequest) -> tuple[dict[str, Any], list[str]]:
    """The Responses body (without model and stream) and warnings."""
    options = _options(request)
    store = options.get("store") is not False
    items = to_responses_input(request.messages, send_reasoning=request.send_reasoning, store=store)
    body: dict[str, Any] = {"input": items}
    if request.system:
        body["instructions"] = request.system
    if request.max_output_tokens is not None:
        body["max_output_tokens"] = request.max_output_tokens
    for key in ("temperature", "top_p"):
        if getattr(request, key) is not None:
            body[key] = getattr(request, key)
    keys = ("top_k", "presence_penalty", "frequency_penalty", "seed", "stop_sequences")
    warnings = _unsupported(request, keys, "Responses")
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
                "strict": False,
            }
            for t in stable_tools(request.tools)
        ]
        if request.tool_choice is not None:
            choice = request.tool_choice
            if isinstance(choice, dict):
                name = choice.get("tool_name") or choice.get("name")
                body["tool_choice"] = {"type": "function", "name": name}
            else:
                body["tool_choice"] = choice
    if request.output_schema is not None:
        body["text"] = {
            "format": {
                "type": "json_schema",
                "name": "response",
                "schema": request.output_schema,
                "strict": False,
            }
        }
    body.update(_cached(request))
    include = body.get("include")
    if not store and "reasoning" in options and ENCRYPTED not in (include or []):
        # Without it a stateless request gets reasoning items it cannot send back. Only
        # asked for when reasoning is configured: non-reasoning models reject it.
        body["include"] = [*(include or []), ENCRYPTED]
    return body, warnings


def to_chat_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """Chat messages: each assistant step becomes an assistant message with its
    ``tool_calls``, then one ``tool`` message per result. A system prompt goes first as a
    ``system`` message (OpenAI maps it to ``developer`` for reasoning models itself)."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        if message.role in ("system", "user"):
            out += _chat_user(message)
            continue
        for step in split_steps(message.parts):
            text = "".join(p.text for p in step if isinstance(p, TextPart))
            calls = [p for p in step if isinstance(p, ToolCallPart)]
            if text or calls:
                item: dict[str, Any] = {"role": "assistant", "content": text or None}
                if calls:
                    item["tool_calls"] = [
                        {
                            "id": c.tool_call_id,
                            "type": "function",
                            "function": {
                                "name": c.tool_name,
                                "arguments": tool_input_json(c.input),
                            },
                        }
                        for c in calls
                    ]
                out.append(item)
            for result in step_results(step):
                content = tool_output_text(result.output)
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": result.tool_call_id,
                        "content": f"Error: {content}" if result.is_error else content,
                    }
                )
    return out


def _chat_user(message: Message) -> list[dict[str, Any]]:
    """A user (or system) message; plain text stays a string, which every server accepts."""
    out: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, FilePart) and message.role == "user":
            if part.media_type.startswith("image/"):
                content.append({"type": "image_url", "image_url": {"url": data_url(part)}})
            else:
                file = {"filename": "file", "file_data": data_url(part)}
                content.append({"type": "file", "file": file})
        elif isinstance(part, ToolResultPart):
            output = tool_output_text(part.output)
            out.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": output})
    if all(c["type"] == "text" for c in content):
        text = "".join(c["text"] for c in content)
        if text or not out:
            out.append({"role": message.role, "content": text})
    else:
        out.append({"role": message.role, "content": content})
    return out


def to_responses_input(
    messages: list[Message], *, send_reasoning: bool = True, store: bool = True
) -> list[dict[str, Any]]:
    """Responses input items: messages, ``reasoning``, ``function_call`` and
    ``function_call_output``.

    A step's items keep their order: a reasoning item goes back before the text and calls
    that followed it, within the turn (after the last user message; the model ignores older
    reasoning, and stored items expire). Only reasoning from this API is sent (parts tagged
    with the item's id; summary parts of one item are joined), and with ``store: false``
    only items with their ``encrypted_content`` (the API cannot look the others up)."""
    items: list[dict[str, Any]] = []
    users = [n for n, m in enumerate(messages) if m.role == "user"]
    turn_start = users[-1] if users else -1
    for n, message in enumerate(messages):
        if message.role in ("system", "user"):
            content: list[dict[str, Any]] = []
            for part in message.parts:
                if isinstance(part, TextPart):
                    content.append({"type": "input_text", "text": part.text})
                elif isinstance(part, FilePart) and part.media_type.startswith("image/"):
                    content.append({"type": "input_image", "image_url": data_url(part)})
                elif isinstance(part, FilePart):
                    content.append(
                        {"type": "input_file", "filename": "file", "file_data": data_url(part)}
                    )
            items.append({"role": message.role, "content": content})
            continue
        for step in split_steps(message.parts):
            within = send_reasoning and n > turn_start
            reasoning = _reasoning_items(step, store) if within else {}
            text: list[str] = []
            for part in step:
                if isinstance(part, TextPart):
                    text.append(part.text)
                    continue
                if isinstance(part, ReasoningPart) and id(part) in reasoning:
                    item = reasoning[id(part)]
                elif isinstance(part, ToolCallPart):
                    item = {
                        "type": "function_call",
                        "call_id": part.tool_call_id,
                        "name": part.tool_name,
                        "arguments": tool_input_json(part.input),
                    }
                else:
                    continue
                if "".join(text):  # the text before it
                    items.append({"role": "assistant", "content": "".join(text)})
                text.clear()
                items.append(item)
            if "".join(text):
                items.append({"role": "assistant", "content": "".join(text)})
            for result in step_results(step):
                content_text = tool_output_text(result.output)
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": result.tool_call_id,
                        "output": f"Error: {content_text}" if result.is_error else content_text,
                    }
                )
    return items


def _reasoning_items(step: list[Part], store: bool) -> dict[int, dict[str, Any]]:
    """The step's reasoning items to send back, keyed by ``id()`` of the first part of each
    (its other parts add their summary or content to it)."""
    found: dict[str, dict[str, Any]] = {}
    first: dict[str, int] = {}
    for part in step:
        if not isinstance(part, ReasoningPart):
            continue
        meta = (part.provider_metadata or {}).get("openai")
        if not isinstance(meta, dict) or not meta.get("item_id"):
            continue  # another provider's reasoning (or another API's): not sendable
        item_id = str(meta["item_id"])
        item = found.get(item_id)
        if item is None:
            item = found[item_id] = {"type": "reasoning", "id": item_id, "summary": []}
            first[item_id] = id(part)
        if meta.get("encrypted_content"):
            item["encrypted_content"] = meta["encrypted_content"]
        if part.text and meta.get("raw"):
            item.setdefault("content", []).append({"type": "reasoning_text", "text": part.text})
        elif part.text:
            item["summary"].append({"type": "summary_text", "text": part.text})
    return {
        first[item_id]: item
        for item_id, item in found.items()
        if store or item.get("encrypted_content")
    }


# --- Chat Completions stream -------------------------------------------------------------


@dataclass
class _Call:
    call_id: str
    name: str
    args: list[str] = field(default_factory=list)


async def chat_parts(chunks: AsyncIterator[Any], warnings: list[str]) -> AsyncIterator[StreamPart]:
    """Chat Completions chunks → stream parts. Tool calls complete at the end of the stream
    (their arguments arrive in pieces keyed by ``index``)."""
    calls: dict[int, _Call] = {}
    usage = Usage()
    response: dict[str, Any] = {}
    raw_finish: str | None = None
    reasoning = False
    refused = False
    async for chunk in chunks:
        if not response and getattr(chunk, "id", None):
            response = {"id": chunk.id, "model": chunk.model}
        if getattr(chunk, "usage", None) is not None:
            usage = _chat_usage(chunk.usage)
        for choice in chunk.choices or []:
            if choice.index != 0:
                continue
            raw_finish = choice.finish_reason or raw_finish
            delta = choice.delta
            if delta is None:
                continue
            thought = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
            if isinstance(thought, str) and thought:
                reasoning = True
                yield ReasoningDelta(text=thought)
            text = delta.content or getattr(delta, "refusal", None)
            if text and reasoning:
                reasoning = False
                yield ReasoningEnd()
            if text:
                refused = refused or bool(getattr(delta, "refusal", None))
                yield TextDelta(text=text)
            for tool in delta.tool_calls or []:
                fn = tool.function
                index = _call_index(tool, calls)
                call = calls.get(index)
                if call is None:
                    name = (fn.name if fn else None) or ""
                    call = calls[index] = _Call(tool.id or f"call_{index}", name)
                    if reasoning:
                        reasoning = False
                        yield ReasoningEnd()
                    yield ToolInputStart(tool_call_id=call.call_id, tool_name=call.name)
                if fn and fn.arguments:
                    call.args.append(fn.arguments)
                    yield ToolInputDelta(tool_call_id=call.call_id, delta=fn.arguments)
    if raw_finish is None:
        raise ProviderError(
            "OpenAI stream ended without a finish_reason (connection dropped?)",
            kind="transient",
            provider="openai",
        )
    if reasoning:
        yield ReasoningEnd()
    for index in sorted(calls):
        call = calls[index]
        value, error = parse_tool_input("".join(call.args))
        yield ToolCallChunk(
            tool_call_id=call.call_id, tool_name=call.name, input=value, input_error=error
        )
    finish = CHAT_FINISH.get(raw_finish, "other")
    if calls and finish == "stop":
        finish = "tool-calls"  # some compatible servers report "stop" after tool calls
    if refused:
        finish = "content-filter"
    yield FinishChunk(
        finish_reason=finish,
        raw_finish_reason=raw_finish,
        usage=usage,
        provider_metadata={"openai": {"cached_input_tokens": usage.cached_input_tokens}},
        response=response,
        warnings=warnings,
    )


async def _without_echo(
    parts: AsyncIterator[StreamPart], prefill: str
) -> AsyncIterator[StreamPart]:
    """A continued step's parts without its prefill, for a server that streams it back
    before what the model adds (Mistral's answer to a ``"prefix": true`` message starts with
    the prefix): text that opens the answer and is the prefill is left out, held only while
    it could still be; anything else goes on as it came."""
    held: list[StreamPart] = []
    seen = ""
    async for part in parts:
        if prefill and isinstance(part, TextDelta):
            seen += part.text
            if prefill.startswith(seen):  # the prefill again, or the start of it: wait
                held.append(part)
                if seen == prefill:  # all of it: dropped
                    held.clear()
                    prefill = ""
                continue
            if seen.startswith(prefill):  # the prefill, then what the model adds
                held.clear()
                part = TextDelta(text=seen[len(prefill) :])
            prefill = ""
        elif prefill:
            prefill = ""  # something else first: no echo
        for early in held:
            yield early
        held.clear()
        yield part
    for early in held:  # the answer ended as a start of the prefill: it was the answer
        yield early


def _call_index(tool: Any, calls: dict[int, _Call]) -> int:
    """The delta's ``index``; servers that omit it (some send each call whole) get one by id."""
    if getattr(tool, "index", None) is not None:
        return int(tool.index)
    for index, call in calls.items():
        if tool.id and call.call_id == tool.id:
            return index
    return len(calls)


def _chat_usage(raw: Any) -> Usage:
    prompt = getattr(raw, "prompt_tokens", 0) or 0
    completion = getattr(raw, "completion_tokens", 0) or 0
    prompt_details = getattr(raw, "prompt_tokens_details", None)
    completion_details = getattr(raw, "completion_tokens_details", None)
    return Usage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=getattr(raw, "total_tokens", None) or prompt + completion,
        reasoning_tokens=getattr(completion_details, "reasoning_tokens", 0) or 0,
        cached_input_tokens=getattr(prompt_details, "cached_tokens", 0) or 0,
    )


# --- Responses stream --------------------------------------------------------------------


async def responses_parts(
    events: AsyncIterator[Any], warnings: list[str]
) -> AsyncIterator[StreamPart]:
    """Responses stream events → stream parts.

    Each summary part of a reasoning item becomes a reasoning part tagged with the item's id
    (``provider_metadata["openai"]["item_id"]``); when the item is done, its
    ``encrypted_content`` is added to the last one (an item without a summary still gets an
    empty part), so ``to_responses_input`` can send the item back."""
    calls: dict[str, _Call] = {}  # by item id
    done_calls = 0
    reasoning = False  # a reasoning part is open
    part_done = False  # ...and its summary part has ended (closed on the next one)
    item_id: str | None = None  # the reasoning item being streamed
    final: Any = None
    async for event in events:
        kind = getattr(event, "type", "")
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            if reasoning:
                reasoning = part_done = False
                yield ReasoningEnd()
            if event.delta:
                yield TextDelta(text=event.delta)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            if event.delta:
                if part_done:
                    reasoning = part_done = False
                    yield ReasoningEnd()
                tag = None
                if not reasoning and item_id is not None:
                    raw = kind == "response.reasoning_text.delta"  # content, not a summary
                    tag = {"openai": {"item_id": item_id, **({"raw": True} if raw else {})}}
                reasoning = True
                yield ReasoningDelta(text=event.delta, provider_metadata=tag)
        elif kind == "response.reasoning_summary_part.done" and reasoning:
            part_done = True
        elif kind == "response.output_item.added" and event.item.type == "reasoning":
            item_id = getattr(event.item, "id", None)
        elif kind == "response.output_item.done" and event.item.type == "reasoning":
            item = event.item
            metadata: dict[str, Any] = {"item_id": item.id}
            if getattr(item, "encrypted_content", None):
                metadata["encrypted_content"] = item.encrypted_content
            yield ReasoningDelta(provider_metadata={"openai": metadata})
            reasoning = part_done = False
            item_id = None
            yield ReasoningEnd()
        elif kind == "response.output_item.added" and event.item.type == "function_call":
            item = event.item
            calls[item.id] = _Call(item.call_id, item.name)
            if reasoning:
                reasoning = part_done = False
                yield ReasoningEnd()
            yield ToolInputStart(tool_call_id=item.call_id, tool_name=item.name)
        elif kind == "response.function_call_arguments.delta":
            call = calls.get(event.item_id)
            if call is not None and event.delta:
                call.args.append(event.delta)
                yield ToolInputDelta(tool_call_id=call.call_id, delta=event.delta)
        elif kind == "response.output_item.done" and event.item.type == "function_call":
            item = event.item
            calls.pop(item.id, None)
            value, error = parse_tool_input(item.arguments or "")
            done_calls += 1
            yield ToolCallChunk(
                tool_call_id=item.call_id, tool_name=item.name, input=value, input_error=error
            )
        elif kind in ("response.completed", "response.incomplete"):
            final = event.response
        elif kind == "response.failed":
            raise _failed(getattr(event.response, "error", None))
        elif kind == "error":
            raise _failed(event)
    if final is None:
        raise ProviderError(
            "OpenAI stream ended before response.completed (connection dropped?)",
            kind="transient",
            provider="openai",
        )
    if reasoning:
        yield ReasoningEnd()
    for call in calls.values():  # arguments cut off by the token limit
        value, error = parse_tool_input("".join(call.args))
        done_calls += 1
        yield ToolCallChunk(
            tool_call_id=call.call_id, tool_name=call.name, input=value, input_error=error
        )
    finish: FinishReason = "tool-calls" if done_calls else "stop"
    raw_finish = getattr(final, "status", None)
    details = getattr(final, "incomplete_details", None)
    reason = getattr(details, "reason", None)
    if reason == "max_output_tokens":
        finish = "length"
    elif reason == "content_filter":
        finish = "content-filter"
    usage = _responses_usage(getattr(final, "usage", None))
    yield FinishChunk(
        finish_reason=finish,
        raw_finish_reason=reason or raw_finish,
        usage=usage,
        provider_metadata={"openai": {"cached_input_tokens": usage.cached_input_tokens}},
        response={"id": final.id, "model": final.model},
        warnings=warnings,
    )


def _responses_usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    prompt = raw.input_tokens or 0
    output = raw.output_tokens or 0
    input_details = getattr(raw, "input_tokens_details", None)
    output_details = getattr(raw, "output_tokens_details", None)
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=getattr(raw, "total_tokens", None) or prompt + output,
        reasoning_tokens=getattr(output_details, "reasoning_tokens", 0) or 0,
        cached_input_tokens=getattr(input_details, "cached_tokens", 0) or 0,
        cache_creation_input_tokens=getattr(input_details, "cache_write_tokens", 0) or 0,
    )


# --- errors ------------------------------------------------------------------------------


def _failed(error: Any) -> ProviderError:
    """An ``error`` event or a failed response (older SDKs pass these through unraised)."""
    code = getattr(error, "code", None) if error is not None else None
    message = getattr(error, "message", None) or "the response failed"
    return _classify(None, code, None, str(message), {})


def map_error(error: BaseException, *, secret: str | None = None) -> ProviderError:
    """An SDK or transport exception → a ``ProviderError`` a person (and Temporal) can act on."""
    if isinstance(error, openai.APIConnectionError) or is_transport_error(error):
        what = "timed out" if "timeout" in type(error).__name__.lower() else "failed"
        return ProviderError(
            f"OpenAI connection {what}: {type(error).__name__}", kind="transient", provider="openai"
        )
    if isinstance(error, openai.APIError):
        body = error.body if isinstance(error.body, dict) else {}
        message = redact(str(body.get("message") or error.message), secret)
        status = error.status_code if isinstance(error, openai.APIStatusError) else None
        headers = error.response.headers if isinstance(error, openai.APIStatusError) else {}
        err_type = error.type or body.get("type")
        return _classify(status, error.code, err_type, message, headers)
    text = redact(str(error), secret)
    if "credentials" in text.lower() or "api_key" in text.lower():
        return ProviderError(
            f"No OpenAI API key: set OPENAI_API_KEY ({text})", kind="auth", provider="openai"
        )
    return ProviderError(f"OpenAI error: {text}", kind="fatal", provider="openai")


def _classify(
    status: int | None, code: str | None, err_type: str | None, message: str, headers: Any
) -> ProviderError:
    """Decide the kind from the status, the error code and the server's own retry verdict."""
    kind: ErrorKind
    label = code or err_type or ""
    if status is not None:
        kind = kind_for_status(status)
        verdict = should_retry_header(headers)
        if verdict is not None and kind in ("transient", "invalid_request"):
            kind = "transient" if verdict else "fatal"
    else:  # an error event inside a stream
        kind = "transient" if label in TRANSIENT_CODES else "fatal"
    shown = f"{status} " if status else ""
    text = f"OpenAI API error {shown}{label}: {message}".replace(" :", ":")
    if "insufficient_quota" in (code, err_type):
        kind = "fatal"
        text = (
            f"OpenAI says the account is out of quota ({shown}insufficient_quota): check the plan"
            f" and billing at https://platform.openai.com/account/billing. {message}"
        )
    elif (status in (None, 400, 413, 422) and is_context_overflow(f"{label} {message}")) or (
        code == "context_length_exceeded"
    ):
        kind = "context_overflow"
    elif status == 401:
        text = (
            "OpenAI rejected the API key (401): set OPENAI_API_KEY to a valid key (or"
            f" OPENAI_BASE_URL for a compatible server). {message}"
        )
    elif status == 403:
        text = f"OpenAI denied access (403): the key may lack access to this model. {message}"
    return ProviderError(
        text,
        kind=kind,
        status=status,
        retry_after=retry_after(headers) if kind == "transient" else None,
        provider="openai",
    )
