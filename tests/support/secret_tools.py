"""A tool that logs the values of the environment variables it is given, every way a log
record can carry a text: in the message, in its arguments, in an exception's traceback, and
through a logger with a handler of its own that does not propagate to the root (as uvicorn's
loggers do); and a front door's ``--auth`` that logs the credentials it is given. No log
must hold any of them in clear."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from pydantic import BaseModel

from durable_turns.tools import tool

log = logging.getLogger("tests.secret_tools")


class Names(BaseModel):
    names: list[str]


def _own_logger() -> logging.Logger:
    own = logging.getLogger("tests.secret_tools.own")
    if not own.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("OWN %(levelname)s %(message)s"))
        own.addHandler(handler)
        own.propagate = False
    return own


@tool
async def log_secrets(args: Names) -> str:
    """Log each named variable's value (a test of the worker's log redaction)."""
    own = _own_logger()
    for name in args.names:
        value = os.environ[name]
        log.warning("as an argument: %s", value)
        log.warning(f"in the message: {value}")
        own.error("through its own handler: %r", value)
        try:
            raise RuntimeError(f"an error about {value}")
        except RuntimeError:
            log.exception("with a traceback")
    return f"logged {len(args.names)} values"


def authenticate(headers: Mapping[str, str]) -> str | None:
    """``turns serve --auth``: says what it was given through uvicorn's own logger (whose
    handler uvicorn adds as it starts), then checks it against ``TURNS_HTTP_TOKEN``."""
    given = headers.get("authorization", "")
    logging.getLogger("uvicorn.error").warning(
        "auth: %s (keys %s, provider %s)",
        given,
        os.environ.get("TURNS_ENCRYPTION_KEYS"),
        os.environ.get("ANTHROPIC_API_KEY"),
    )
    token = os.environ["TURNS_HTTP_TOKEN"].partition("=")[2]
    return "alice" if given == f"Bearer {token}" else None
