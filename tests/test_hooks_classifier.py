"""``default_context_overflow_classifier``: Think's one regex, on Think's own fixtures."""

from __future__ import annotations

from typing import Any

import pytest

from durable_turns.hooks import CONTEXT_OVERFLOW_PATTERN, default_context_overflow_classifier
from durable_turns.models import ProviderError

OVERFLOWS = [
    "AI_APICallError: prompt is too long: 213450 tokens > 200000 maximum",  # Anthropic
    "This model's maximum context length is 128000 tokens",  # OpenAI
    "context_length_exceeded",  # OpenAI code
    "The input token count exceeds the maximum number of tokens allowed",  # Google
    "Input is too long for requested model",  # Bedrock
    "too many tokens",
    "Please reduce the length of the messages or completion.",  # OpenAI
    "5021: The input exceeded this model context window limit (7968)",  # Workers AI
]

NOT_OVERFLOWS: list[Any] = [
    "rate limit exceeded",
    "network timeout",
    "401 Unauthorized: invalid api key",
    "Internal server error (500)",
    "tool execution failed: ECONNREFUSED",
    "could not reduce the length",
    None,
    {"weird": "object"},
]


@pytest.mark.parametrize("message", OVERFLOWS)
def test_overflow_messages_as_errors_and_strings(message: str) -> None:
    assert default_context_overflow_classifier(message) == "context_overflow"
    assert default_context_overflow_classifier(Exception(message)) == "context_overflow"
    assert default_context_overflow_classifier(ProviderError(message)) == "context_overflow"
    assert default_context_overflow_classifier(message.upper()) == "context_overflow"


@pytest.mark.parametrize("error", NOT_OVERFLOWS)
def test_other_errors_are_not_overflows(error: Any) -> None:
    assert default_context_overflow_classifier(error) is None
    if isinstance(error, str):
        assert default_context_overflow_classifier(Exception(error)) is None


def test_the_pattern_is_thinks() -> None:
    assert CONTEXT_OVERFLOW_PATTERN.pattern == (
        r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length"
        r"|exceeds the maximum number of tokens|input token count|reduce the length of"
        r"|input is too long|too many (?:input )?tokens|context window"
    )
    assert default_context_overflow_classifier("too many input tokens") == "context_overflow"
    assert (
        default_context_overflow_classifier({"error": "context length exceeded"})
        == "context_overflow"
    )
