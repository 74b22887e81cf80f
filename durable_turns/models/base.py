"""The model provider interface, and the typed errors every provider raises (defined in
``durable_turns.errors``).

A provider turns a ``ModelRequest`` (provider-neutral messages, tools, settings) into a
stream of ``StreamPart``s ending with one ``FinishChunk``. Providers never retry
(SDK retries are off): they raise ``ProviderError`` and Temporal owns the retries, so each
attempt is visible in history.
"""

from __future__ import annotations

import abc
import json
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from durable_turns.errors import MAX_PROVIDER_MESSAGE_CHARS as MAX_PROVIDER_MESSAGE_CHARS
from durable_turns.errors import ErrorKind as ErrorKind
from durable_turns.errors import ProviderError as ProviderError
from durable_turns.hooks.types import CacheConfig
from durable_turns.messages import Message, StreamPart, ToolChoice, ToolSpec


class ModelRequest(BaseModel):
    """One model call: everything a provider needs, nothing it has to look up."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str
    """The model name without the provider prefix."""
    system: str = ""
    messages: list[Message] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_choice: ToolChoice | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop_sequences: list[str] | None = None
    seed: int | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    provider_options: dict[str, Any] = Field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    send_reasoning: bool = True
    cached_prompt: bool = False
    """Mark the system prompt for caching even when ``cache`` is off (``with_cached_prompt()``)."""
    cache: CacheConfig = Field(default_factory=CacheConfig)
    """Prompt caching (``activities/models/caching.py``); on by default."""
    conversation_id: str = ""
    """Routes a conversation's requests to the same prompt cache (OpenAI's ``prompt_cache_key``)."""
    attempt: int = 1
    """The activity attempt (1-based); the demo provider scripts failures with it."""
    continue_text: str = ""
    """Text the reply already holds (what a lost attempt of this step streamed, which the
    user saw): the provider sends it as the start of the model's answer (an assistant
    prefill) and streams only what the model adds. Set only when ``continues(request)``."""


class ModelProvider(abc.ABC):
    """Streams one model step. Implementations: demo, anthropic, openai."""

    name: str = ""
    continues_prefill: bool = False
    """Whether the provider can continue an answer from a prefilled start
    (``ModelRequest.continue_text``): a step whose worker was lost then goes on from what it
    had streamed instead of starting again."""

    def continues(self, request: ModelRequest) -> bool:
        """Whether this request can be continued from a prefill (``continues_prefill``, and
        nothing in the request that rules a prefill out)."""
        return self.continues_prefill

    @abc.abstractmethod
    def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        """Yield the step's parts, ending with a ``FinishChunk``; raise ``ProviderError``."""

    def count_tokens(self, system: str, messages: list[Message]) -> int:
        """Estimate the prompt's tokens (about four characters a token by default)."""
        return (len(system) + sum(len(m.model_dump_json()) for m in messages)) // 4

    async def aclose(self) -> None:
        """Release clients (HTTP connection pools)."""
        return None


def parse_tool_input(raw: str) -> tuple[Any, str | None]:
    """Parse streamed tool-call arguments: (value, None) or (raw text, error)."""
    if not raw.strip():
        return {}, None
    try:
        return json.loads(raw), None
    except json.JSONDecodeError as e:
        return raw, f"tool input is not valid JSON: {e}"
