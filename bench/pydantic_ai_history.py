"""A bench conversation as pydantic-ai's ``message_history``, for both pydantic-ai peers
(``bench.peer_pydantic_ai``, ``bench.stream_peer_pydantic_ai``; peers' venv only)."""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart


def history(prior: list[dict[str, str]]) -> list[ModelMessage]:
    """``{"role", "text"}`` messages: a user's as a request, an assistant's as a response."""
    return [
        ModelRequest(parts=[UserPromptPart(m["text"])])
        if m["role"] == "user"
        else ModelResponse(parts=[TextPart(m["text"])])
        for m in prior
    ]
