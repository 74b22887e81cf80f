"""Keeping API keys out of every error, log line and history event.

``redact`` masks the configured provider keys (their variables', and any a provider hands it),
in the forms a gateway may echo them: verbatim, base64 and URL-safe base64 (also inside a
longer encoded text such as ``Basic user:key``), in any letter case; and anything shaped like
``sk-…``. ``ProviderError`` applies it to its final message, so no caller can forget.
"""

from __future__ import annotations

import base64
import functools
import os
import re

_SECRET = re.compile(r"\b(sk-[A-Za-z0-9_\-]{6})[A-Za-z0-9_\-*]{6,}")


SECRET_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY")
"""Whose values are masked wherever a provider error's text goes."""
MIN_SECRET = 8
_known: set[str] = set()
"""Keys handed to ``redact`` (a provider's own key): masked in every later error too."""


def secret_variants(secret: str) -> set[str]:
    """How a key can show up in text: verbatim, base64 and URL-safe base64 (padded or not,
    also inside a longer encoded text such as ``user:key``), in any letter case (matched
    case-insensitively)."""
    raw = secret.encode()
    variants = {secret}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        encoded = encode(raw).decode()
        variants |= {encoded, encoded.rstrip("=")}
        # inside a longer encoded text (``Basic base64(user:key)``): the key's bytes at any
        # offset modulo 3, without the characters its neighbours share
        for offset, skip in ((0, 0), (1, 2), (2, 3)):
            variants.add(encode(b"\0" * offset + raw).decode().rstrip("=")[skip:-3])
    return {v for v in variants if len(v) >= MIN_SECRET}


@functools.lru_cache(maxsize=16)
def _secrets_pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    variants = {v for s in secrets for v in secret_variants(s)}
    if not variants:
        return None
    alternatives = sorted((re.escape(v) for v in variants), key=len, reverse=True)
    return re.compile("|".join(alternatives), re.I)


def configured_secrets() -> frozenset[str]:
    """The provider keys of this process: its key variables and the keys providers use."""
    from_env = {v for name in SECRET_VARIABLES if (v := os.environ.get(name))}
    return frozenset(s for s in from_env | _known if len(s) >= MIN_SECRET)


def redact(text: str, *secrets: str | None) -> str:
    """Mask API keys in ``text``: the configured keys (and ``secrets``), their base64 forms
    and case variants, and anything shaped like ``sk-…``. Apply it to the *final* message."""
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET:
            _known.add(secret)
    for secret in secrets:  # short keys a caller passes explicitly: verbatim only
        if secret and 4 <= len(secret) < MIN_SECRET:
            text = text.replace(secret, "***")
    pattern = _secrets_pattern(configured_secrets())
    if pattern is not None:
        text = pattern.sub("***", text)
    return _SECRET.sub(r"\1***", text)
