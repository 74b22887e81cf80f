"""The default context-overflow classifier: Think's one regex, case-insensitive, unanchored."""

from __future__ import annotations

import json
import re
from typing import Any

from durable_turns.hooks.types import ChatErrorClassification

CONTEXT_OVERFLOW_PATTERN = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length"
    r"|exceeds the maximum number of tokens|input token count|reduce the length of"
    r"|input is too long|too many (?:input )?tokens|context window",
    re.IGNORECASE,
)


def default_context_overflow_classifier(
    error: Any, ctx: Any = None
) -> ChatErrorClassification | None:
    """Return ``"context_overflow"`` when the error's text matches the pattern, else None.

    Favours recall over precision: a false positive self-heals, since the retry hits the
    same error, spends the budget and surfaces terminally anyway.
    """
    if error is None:
        return None
    if isinstance(error, BaseException):
        text = str(error)
    elif isinstance(error, str):
        text = error
    else:
        try:
            text = json.dumps(error)
        except (TypeError, ValueError):
            text = str(error)
    return "context_overflow" if CONTEXT_OVERFLOW_PATTERN.search(text) else None
