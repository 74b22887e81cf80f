"""Think's ``truncateOlderMessages``, shaped so the prompt cache stays warm.

Think keeps the last 4 messages intact and, in older ones, cuts tool outputs to 500
characters and texts to 10,000. Done literally, the boundary moves with every message: each
turn, the messages that just became "older than 4" are rewritten, so every request's prefix
differs from the previous one's a few messages before its end, and whatever the cache held
from there on is lost (a big tool output crossing the line costs a full cache write).

Here truncation is a pure function of a message and its *age bucket*: messages are counted
from the start of the context (after compaction) and the boundary only moves in steps of
``every`` messages (default 8, about four turns). Between two moves, no message changes, so
the prefix of a request is byte for byte the previous request's; when the boundary moves,
the messages of one bucket are truncated once and stay so. The price: up to ``every - 1``
messages older than ``keep_recent`` keep their full text for a while (more input tokens,
mostly read from the cache at a tenth of the price). ``every=1`` is Think's exact rule.
Only messages that are long enough change at all; short ones are identical either way.
"""

from __future__ import annotations

import json

from durable_turns.hooks.types import TruncationConfig
from durable_turns.messages import Message, Part, TextPart, ToolResultPart


def truncation_cutoff(count: int, config: TruncationConfig) -> int:
    """How many leading messages (of ``count``) are truncated."""
    older = count - config.keep_recent
    if not config.enabled or older <= 0:
        return 0
    return (older // config.every) * config.every


def truncate_older(messages: list[Message], config: TruncationConfig | None) -> list[Message]:
    """``messages`` with the older ones truncated (the list and messages are new objects only
    where something changed)."""
    config = config or TruncationConfig()
    cutoff = truncation_cutoff(len(messages), config)
    if cutoff == 0:
        return messages
    return [truncate_message(m, config) if i < cutoff else m for i, m in enumerate(messages)]


def truncate_message(message: Message, config: TruncationConfig) -> Message:
    """One message with long texts and tool outputs cut (the same input, the same bytes)."""
    parts: list[Part] = []
    changed = False
    for part in message.parts:
        new = _truncate_part(part, config)
        changed = changed or new is not part
        parts.append(new)
    return message.model_copy(update={"parts": parts}) if changed else message


def _truncate_part(part: Part, config: TruncationConfig) -> Part:
    if isinstance(part, TextPart) and len(part.text) > config.text_chars:
        return TextPart(text=cut(part.text, config.text_chars))
    if isinstance(part, ToolResultPart):
        text = part.output if isinstance(part.output, str) else _json(part.output)
        if len(text) > config.tool_output_chars:
            return part.model_copy(update={"output": cut(text, config.tool_output_chars)})
    return part


def cut(text: str, limit: int) -> str:
    return f"{text[:limit]}… [truncated {len(text) - limit} characters]"


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
