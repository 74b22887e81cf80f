"""Keeping API keys, and any part of one, out of every error, log line and history event.

``redact`` masks every run of :data:`MIN_RUN` (12) or more characters of a configured key (its
variables', and any a provider hands it) wherever it appears, in the forms a gateway may echo
it: verbatim, base64 and URL-safe base64 (also a fragment of a longer encoded text such as
``Basic user:key``, at any alignment), in any letter case; and anything shaped like
``sk-…``. A gateway that echoes the key's first 40 characters in a ``request-id``, or a
lower-cased piece of it, leaks nothing. ``ProviderError`` applies it to its final message,
and the worker's log lines pass through it (``RedactingFormatter``).

How it stays cheap: two compiled expressions per set of keys, built once (again only when the
keys change). The first finds the runs of 12 or more characters drawn from the keys' own
alphabet (a character class: ordinary prose has few, a log line 5 µs, 4 KB of text 0.1 ms);
only inside those does the second look, every window of 12 characters of every form in one
case-insensitive expression factored as a trie (each position is tried against the windows'
shared prefixes, never against each window in turn). A hit is then grown over the windows that
overlap or touch it, so the whole run of the key is masked, not only its first 12 characters.
"""

from __future__ import annotations

import base64
import logging
import os
import re

_SECRET = re.compile(r"\b(sk-[A-Za-z0-9_\-]{6})[A-Za-z0-9_\-*]{6,}")


SECRET_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY")
"""Whose values are masked wherever a provider error's text goes."""
MIN_SECRET = 8
"""Keys shorter than this are not masked (too short to tell from ordinary text)."""
MIN_RUN = 12
"""Any run of this many characters of a key (or of one of its encoded forms) is masked; a key
shorter than this, whole."""
MASK = "***"
_known: set[str] = set()
"""Keys handed to ``redact`` (a provider's own key): masked in every later error too."""


def secret_forms(secret: str) -> set[str]:
    """The texts whose every run of MIN_RUN characters belongs to ``secret``: the key itself,
    and its base64 and URL-safe base64 encodings at each of the three byte alignments it can
    have inside a longer encoded text (``user:key``), without the characters its neighbours
    share."""
    raw = secret.encode()
    forms = {secret}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode()
        forms |= {whole, whole.rstrip("=")}
        for offset, skip in ((0, 0), (1, 2), (2, 3)):
            encoded = encode(b"\0" * offset + raw).decode().rstrip("=")
            # the last character of a partial group depends on the byte that follows
            end = len(encoded) - (1 if (offset + len(raw)) % 3 else 0)
            forms.add(encoded[skip:end])
    return {f for f in forms if len(f) >= MIN_SECRET}


def secret_variants(secret: str) -> set[str]:
    """What is matched of ``secret``: every window of MIN_RUN characters of each of its forms
    (a form shorter than that, whole), lower-cased (matching ignores case)."""
    windows: set[str] = set()
    for form in secret_forms(secret):
        text = form.lower()
        if len(text) <= MIN_RUN:
            windows.add(text)
        else:
            windows.update(text[i : i + MIN_RUN] for i in range(len(text) - MIN_RUN + 1))
    return windows


def _trie_pattern(words: set[str]) -> str:
    """One regular expression matching exactly ``words``, factored by shared prefixes."""
    trie: dict[str, dict] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, dict]) -> str:
        ends = "" in node
        branches = [re.escape(c) + build(child) for c, child in sorted(node.items()) if c]
        if not branches:
            return ""
        singles = [b for b in branches if len(b) == 1 or (len(b) == 2 and b[0] == "\\")]
        if len(branches) == 1:
            body = branches[0]
        elif len(singles) == len(branches):
            body = "[" + "".join(singles) + "]"
        else:
            body = "(?:" + "|".join(branches) + ")"
        if ends:
            body = f"(?:{body})?"
        return body

    return build(trie)


class _Matcher:
    """The compiled form of a set of keys: built once, used for every text."""

    GRAM = 6
    """Windows are found through their substrings of this length, looked up every
    :attr:`step` characters: every window of MIN_RUN holds one at such a position."""

    def __init__(self, secrets: frozenset[str]) -> None:
        windows = {w for s in secrets for w in secret_variants(s)}
        self.empty = not windows
        if self.empty:
            return
        alphabet = {c for w in windows for c in w + w.upper()}
        chars = "".join(re.escape(c) for c in sorted(alphabet))
        shortest = min(len(w) for w in windows)
        self.longest = max(len(w) for w in windows)
        self.gram = min(self.GRAM, shortest)
        self.step = shortest - self.gram + 1
        self.grams = {w[i : i + self.gram] for w in windows for i in range(len(w) - self.gram + 1)}
        self.runs = re.compile(f"[{chars}]{{{shortest},}}")
        self.windows = re.compile(_trie_pattern(windows), re.I)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where ``text`` holds runs of a key: each hit grown over the windows that overlap
        or touch it."""
        found: list[tuple[int, int]] = []
        grams, gram, step, longest = self.grams, self.gram, self.step, self.longest
        for run in self.runs.finditer(text):
            start, end = run.span()
            lowered = text[start:end].lower()
            if len(lowered) != end - start:  # a character whose lower case is longer
                found += self._verify(text, start, end, start, end)
                continue
            last = len(lowered) - gram
            at = 0
            while at <= last:
                if lowered[at : at + gram] not in grams:
                    at += step
                    continue
                lo = start + max(0, at + gram - longest)
                hits = self._verify(text, lo, min(end, start + at + longest), start, end)
                if not hits:
                    at += step
                    continue
                found += hits
                resume = hits[-1][1] - start  # the next multiple of step at or past the span
                at = max(at + step, -(-resume // step) * step)
        return found

    def _verify(self, text: str, lo: int, hi: int, start: int, end: int) -> list[tuple[int, int]]:
        """The runs of a key that begin in ``text[lo:hi]``, grown within ``text[start:end]``."""
        found: list[tuple[int, int]] = []
        while (hit := self.windows.search(text, lo, hi)) is not None:
            first, stop = hit.span()
            at = first + 1
            while at <= stop and at < end:
                more = self.windows.match(text, at, end)
                if more is not None and more.end() > stop:
                    stop = more.end()
                at += 1
            if found and first <= found[-1][1]:
                found[-1] = (found[-1][0], max(stop, found[-1][1]))
            else:
                found.append((first, stop))
            lo = stop
        return found


_matchers: dict[frozenset[str], _Matcher] = {}


def _matcher(secrets: frozenset[str]) -> _Matcher:
    matcher = _matchers.get(secrets)
    if matcher is None:
        if len(_matchers) >= 16:
            _matchers.clear()
        matcher = _matchers[secrets] = _Matcher(secrets)
    return matcher


_configured: tuple[tuple[str | None, ...], int, frozenset[str]] = ((), -1, frozenset())


def configured_secrets() -> frozenset[str]:
    """The provider keys of this process: its key variables and the keys providers use."""
    global _configured
    env = tuple(os.environ.get(name) for name in SECRET_VARIABLES)
    if env != _configured[0] or len(_known) != _configured[1]:
        secrets = frozenset(s for s in {*env, *_known} if s and len(s) >= MIN_SECRET)
        _configured = (env, len(_known), secrets)
    return _configured[2]


def _mask_runs(matcher: _Matcher, text: str) -> str:
    """``text`` with each run of a key replaced by one MASK."""
    spans = matcher.spans(text)
    if not spans:
        return text
    out, last = [], 0
    for start, end in spans:
        if end <= last:
            continue
        out += [text[last : max(start, last)], MASK]
        last = end
    out.append(text[last:])
    return "".join(out)


def redact(text: str, *secrets: str | None) -> str:
    """Mask API keys in ``text``: every run of MIN_RUN characters of a configured key (and of
    ``secrets``), of its base64 forms, in any case, and anything shaped like ``sk-…``. Apply it
    to the *final* message."""
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET:
            _known.add(secret)
    for secret in secrets:  # short keys a caller passes explicitly: verbatim only
        if secret and 4 <= len(secret) < MIN_SECRET:
            text = text.replace(secret, MASK)
    matcher = _matcher(configured_secrets())
    if not matcher.empty:
        text = _mask_runs(matcher, text)
    return _SECRET.sub(r"\1***", text) if "sk-" in text else text


class RedactingFormatter(logging.Formatter):
    """A log formatter whose every line (message, traceback and all) is :func:`redact`-ed."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def redact_logs(logger: logging.Logger | None = None) -> None:
    """Make every handler of ``logger`` (the root logger by default) redact what it writes."""
    for handler in (logger or logging.getLogger()).handlers:
        current = handler.formatter
        if isinstance(current, RedactingFormatter):
            continue
        formatter = RedactingFormatter()
        if current is not None:  # keep its format
            formatter._fmt = current._fmt
            formatter._style = current._style
            formatter.datefmt = current.datefmt
        handler.setFormatter(formatter)
