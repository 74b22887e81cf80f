"""The secrets an environment configures, registered to be masked before anything logs.

Every entry point (each ``turns`` command, ``python worker.py``, the codec server) calls
:func:`install_log_redaction` first: the provider keys, the passwords and secret query values
of the URLs it is given, the front door's tokens, the codec server's token and the
encryption keys are registered with ``durable_turns.redaction``, and from then on every log
record of every logger is masked. This sits above ``redaction``, which only keeps and masks
what it is given, because it reads settings the way the modules that define them do
(``config``, ``codec``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

from durable_turns.codec import SERVER_TOKEN_ENV, CodecError, keys_spec, parse_keys
from durable_turns.config import http_tokens, url_secrets
from durable_turns.redaction import SECRET_VARIABLES, install_record_factory, register

URL_VARIABLES = (
    "TURNS_STORE_URL",
    "TURNS_CHUNK_STREAM_URL",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "TEMPORAL_ADDRESS",
)
"""Whose passwords and secret query values are secrets."""


def register_environment(environ: Mapping[str, str] | None = None) -> None:
    """Register every secret the environment configures, before anything reads it: a log
    line written while the process starts is masked too. A malformed setting registers what
    it can (the code that reads it says what is wrong, without the value)."""
    env = os.environ if environ is None else environ
    register(*(env.get(name) for name in SECRET_VARIABLES), env.get(SERVER_TOKEN_ENV))
    for name in URL_VARIABLES:
        register(*url_secrets(env.get(name)))
    with contextlib.suppress(ValueError):
        register(*http_tokens(env.get("TURNS_HTTP_TOKEN") or ""))
    with contextlib.suppress(CodecError, ValueError):
        if spec := keys_spec(env):
            parse_keys(spec)  # registers each key, valid or not


def install_log_redaction(environ: Mapping[str, str] | None = None) -> None:
    """Register the environment's secrets (:func:`register_environment`), then mask every
    secret in every log record this process makes (``redaction.install_record_factory``).
    Called once by each entry point before anything logs; a second call only registers."""
    register_environment(environ)
    install_record_factory()
