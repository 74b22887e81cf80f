"""The Session that ``configure_session`` shapes: context blocks, compaction and caching.

It runs once per worker start. Context blocks build the system prompt (in the order they
were added); without any, the hooks' ``system_prompt`` is used. ``with_cached_prompt()``
asks providers that support it to cache the prompt. ``on_compaction(summariser)`` and
``compact_after(tokens, token_counter)`` configure compaction: ``needs_compaction`` and
``compact`` fold older messages into a summary for the engine's compaction step.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from durable_turns.messages import Message, TextPart, copied

ContextProvider = Callable[[], str | Awaitable[str]]
Summariser = Callable[[list[Message]], str | Awaitable[str]]
"""Receives the messages to fold away and returns their summary text."""
TokenCounter = Callable[[list[Message]], int]


def approximate_token_count(messages: list[Message]) -> int:
    """About four characters a token: the default counter when none is given."""
    chars = sum(len(m.model_dump_json()) for m in messages)
    return chars // 4


@dataclass
class ContextBlock:
    name: str
    provider: ContextProvider | str | None = None
    description: str = ""
    max_tokens: int | None = None

    async def render(self) -> str:
        value: str | Awaitable[str]
        if self.provider is None:
            value = ""
        elif isinstance(self.provider, str):
            value = self.provider
        else:
            value = self.provider()
        text = await value if inspect.isawaitable(value) else value
        if self.max_tokens is not None:
            text = text[: self.max_tokens * 4]
        return text


@dataclass
class Session:
    context_blocks: list[ContextBlock] = field(default_factory=list)
    summariser: Summariser | None = None
    compact_after_tokens: int | None = None
    token_counter: TokenCounter = approximate_token_count
    cached_prompt: bool = False

    def with_context(
        self,
        name: str,
        provider: ContextProvider | str | None = None,
        description: str = "",
        max_tokens: int | None = None,
    ) -> Session:
        self.context_blocks.append(ContextBlock(name, provider, description, max_tokens))
        return self

    def on_compaction(self, summariser: Summariser) -> Session:
        self.summariser = summariser
        return self

    def compact_after(self, tokens: int, token_counter: TokenCounter | None = None) -> Session:
        self.compact_after_tokens = tokens
        if token_counter is not None:
            self.token_counter = token_counter
        return self

    def with_cached_prompt(self) -> Session:
        self.cached_prompt = True
        return self

    def count_tokens(self, messages: list[Message]) -> int:
        """The token counter's count. A counter given to ``compact_after`` is your code, so
        it gets its own copies of the messages (the worker shares what it read from the
        store); the built-in one only reads them."""
        counter = self.token_counter
        return counter(messages if counter is approximate_token_count else copied(messages))

    def needs_compaction(self, messages: list[Message]) -> bool:
        """Whether ``messages`` passed the ``compact_after`` budget (by the token counter)."""
        if self.compact_after_tokens is None:
            return False
        return self.count_tokens(messages) > self.compact_after_tokens

    async def summarise(self, head: list[Message]) -> str:
        """The summariser's text for ``head``, "" without a summariser or when it gave
        nothing. It is your code, so it gets its own copies, as ``count_tokens`` gives."""
        if self.summariser is None:
            return ""
        value = self.summariser(copied(head))
        summary = await value if inspect.isawaitable(value) else value
        return str(summary or "")

    async def compact(self, messages: list[Message], keep_recent: int = 4) -> list[Message] | None:
        """All but the last ``keep_recent`` messages folded into one summary message, or
        None when there is no summariser, nothing to fold, or the summariser gave nothing
        (the caller then keeps the messages as they are)."""
        if self.summariser is None or len(messages) <= keep_recent:
            return None
        head, tail = messages[:-keep_recent], messages[-keep_recent:]
        summary = await self.summarise(head)
        if not summary:
            return None
        folded = Message(
            id=f"summary-through-{head[-1].id}",
            role="system",
            parts=[TextPart(text=f"Summary of the earlier conversation:\n{summary}")],
            metadata={"compacted": len(head)},
        )
        return [folded, *tail]

    async def system_prompt(self, default: str) -> str:
        """The system prompt built from the context blocks, or ``default`` without any."""
        if not self.context_blocks:
            return default
        sections = []
        for block in self.context_blocks:
            text = await block.render()
            heading = f"## {block.name}" + (f" ({block.description})" if block.description else "")
            sections.append(f"{heading}\n{text}" if text else heading)
        return "\n\n".join(sections)
