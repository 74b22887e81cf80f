"""Who is asking, and which conversation a chat id names for them.

An *authenticate* callable takes the request's headers and returns a principal (a string,
e.g. a user id), or ``None`` to refuse it with 401. It may be async. The built-in one checks
a bearer token (``TURNS_HTTP_TOKEN``): either one token (principal ``default``) or
``name=token`` pairs separated by commas, one principal per name.

Chats are scoped to their principal by construction: with a principal, chat id ``c`` is the
conversation ``<principal, percent-encoded>:<c>``, so one principal's requests cannot name
another's conversation at all (no lookup, no shared table to get wrong). With no
authentication configured, the chat id is the conversation id itself.
"""

from __future__ import annotations

import hmac
import inspect
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import quote

from durable_turns.config import http_tokens
from durable_turns.contract import id_problem
from durable_turns.errors import Unauthorized
from durable_turns.redaction import register

Authenticate = Callable[[Mapping[str, str]], "str | Awaitable[str | None] | None"]
"""``headers -> principal`` (or ``None``: 401); headers are lower-cased."""


def bearer_tokens(spec: str) -> Authenticate:
    """The built-in mode: ``TURNS_HTTP_TOKEN`` = ``token`` or ``alice=tok1,bob=tok2``."""
    tokens = http_tokens(spec)
    register(*tokens)  # masked in every log record

    def authenticate(headers: Mapping[str, str]) -> str | None:
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return None
        for token, name in tokens.items():  # constant time per token
            if hmac.compare_digest(token.encode(), given.strip().encode()):
                return name
        return None

    return authenticate


async def principal_of(authenticate: Authenticate | None, headers: Mapping[str, str]) -> str | None:
    """The request's principal; ``None`` when no authentication is configured."""
    if authenticate is None:
        return None
    result = authenticate(headers)
    if inspect.isawaitable(result):
        result = await result
    if not result:
        raise Unauthorized("missing or invalid credentials")
    return str(result)


def conversation_id(principal: str | None, chat_id: str) -> str:
    """The conversation a chat id names for a principal (see the module's docstring)."""
    return chat_id if principal is None else f"{quote(principal, safe='')}:{chat_id}"


def chat_problem(principal: str | None, chat_id: str) -> str | None:
    """Why a chat id cannot name a conversation (the engine's id rules), or None."""
    problem = id_problem(chat_id, "chat id")
    if problem is None:
        problem = id_problem(conversation_id(principal, chat_id), "chat id")
    return problem
