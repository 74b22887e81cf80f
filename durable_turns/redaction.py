"""Keeping every configured secret, and any part of one, out of every error, log record and
history event.

**What is masked.** ``redact`` masks every run of :data:`MIN_RUN` (12) or more characters of a
secret wherever it appears, in the forms a gateway may echo it: verbatim, base64 and URL-safe
base64 (also a fragment of a longer encoded text such as ``Basic user:key``, at any alignment),
in any letter case; and anything shaped like ``sk-…``. A gateway that echoes the key's first
40 characters in a ``request-id``, or a lower-cased piece of it, leaks nothing.

**Which values are secrets: one registry.** The provider key variables
(:data:`SECRET_VARIABLES`, read live), and every value :func:`register`-ed by the code that
reads a secret's configuration, wherever it is given (environment, flag, file or code):

* any key a provider is handed (``redact(text, key)``);
* MCP servers (``McpServerConfig.resolved``): every value a ``${VAR}`` fills in (URL, headers,
  env, args, command, cwd), every ``env`` and header value (and each word of one, the token of
  ``Bearer <token>``), and a URL's password and secret query values;
* the front door's bearer tokens (``TURNS_HTTP_TOKEN``, ``bearer_tokens``), the payload
  encryption keys (``TURNS_ENCRYPTION_KEYS``, ``parse_keys``), the codec server's token;
* the passwords and secret query values (``?key=``, ``?token=``, …) of the store, chunk-stream
  and provider base URLs (``Settings``, :func:`register_environment`).

Values shorter than :data:`MIN_SECRET` (8) characters are not registered: too short to tell
from ordinary text.

**Where.** ``ProviderError`` and tool errors (MCP's included) apply ``redact`` to their final
message, so what reaches a turn's result, ``state``, the transcript and the history is masked;
and every log record of the process passes through it (:func:`install_log_redaction`).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

_SECRET = re.compile(r"\b(sk-[A-Za-z0-9_\-]{6})[A-Za-z0-9_\-*]{6,}")


SECRET_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY")
"""Whose values are masked wherever a provider error's text goes."""
MIN_SECRET = 8
"""Keys shorter than this are not masked (too short to tell from ordinary text)."""
MIN_RUN = 12
"""Any run of this many characters of a key (or of one of its encoded forms) is masked; a key
shorter than this, whole."""
MASK = "***"
_known: frozenset[str] = frozenset()
"""Secrets registered (:func:`register`, or handed to ``redact``: a provider's own key):
masked in every later text too. Replaced whole on each change (copy on write), so a reader on
another thread never sees it change under it."""
_register_lock = threading.Lock()


def register(*secrets: str | None) -> None:
    """Mask these values from now on wherever :func:`redact` looks (every log record too,
    see :mod:`durable_turns.redaction`). Values shorter than :data:`MIN_SECRET` are ignored:
    too short to tell from ordinary text."""
    global _known
    new = {s for s in secrets if s and len(s) >= MIN_SECRET} - _known
    if new:
        with _register_lock:
            _known = _known | new


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


_configured: tuple[tuple[str | None, ...], frozenset[str] | None, frozenset[str]] = (
    (),
    None,
    frozenset(),
)


def configured_secrets() -> frozenset[str]:
    """The secrets of this process: its provider key variables, the keys providers use and
    every value registered (:func:`register`)."""
    global _configured
    env = tuple(os.environ.get(name) for name in SECRET_VARIABLES)
    known = _known
    if env != _configured[0] or known is not _configured[1]:
        secrets = frozenset(s for s in {*env, *known} if s and len(s) >= MIN_SECRET)
        _configured = (env, known, secrets)
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
    register(*secrets)
    for secret in secrets:  # short keys a caller passes explicitly: verbatim only
        if secret and 4 <= len(secret) < MIN_SECRET:
            text = text.replace(secret, MASK)
    matcher = _matcher(configured_secrets())
    if not matcher.empty:
        text = _mask_runs(matcher, text)
    return _SECRET.sub(r"\1***", text) if "sk-" in text else text


# --- every log record ---------------------------------------------------------------------

_installed = False
_install_lock = threading.Lock()
_tracebacks = logging.Formatter()


def install_record_factory() -> None:
    """Mask every secret in every log record this process makes, from now on (a second call
    does nothing). Entry points call ``durable_turns.environment_secrets.install_log_redaction``,
    which registers the environment's secrets and then calls this, before anything logs.

    Why a record factory (:func:`logging.setLogRecordFactory`): every record of every logger
    is made by it, whatever handlers it then reaches. A filter on the root *logger* sees only
    the records logged to the root logger itself (records propagated from ``httpx``, ``mcp``
    or ``temporalio`` skip it); filters or formatters on the root *handlers* miss the handlers
    a library adds to its own loggers, and any added later (uvicorn configures its own with
    ``dictConfig`` as it starts). The factory wraps the one installed before it, so another
    factory keeps working. What a record carries is masked as it is made
    (:func:`redact_record`): its message, arguments, traceback and stack; fields a caller
    adds with ``extra=`` are its own.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        made = logging.getLogRecordFactory()

        def redacting_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = made(*args, **kwargs)
            redact_record(record)
            return record

        logging.setLogRecordFactory(redacting_record)
        _installed = True


def redact_record(record: logging.LogRecord) -> None:
    """Mask every secret in ``record``: a record with none is left as it is (its arguments
    kept for handlers that read them); in one with a secret each argument that holds one
    becomes its masked text (the whole message, when that is not enough); a traceback that
    holds one is kept as its masked text (``exc_text``, which every ``Formatter`` prints), the
    exception object dropped. If masking fails, the record says so instead of its message."""
    try:
        _redact_message(record)
        if record.exc_info and record.exc_info[0] is not None:
            text = record.exc_text or _tracebacks.formatException(record.exc_info)
            clean = redact(text)
            if clean != text:
                record.exc_info, record.exc_text = None, clean
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
    except Exception as e:  # closed, not open: a record that cannot be checked says nothing
        record.msg = f"(a log record was withheld: masking its secrets failed: {type(e).__name__})"
        record.args, record.exc_info, record.exc_text, record.stack_info = (), None, None, None


def _redact_message(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a bad format: the handler reports the message and its arguments
        record.msg, record.args = redact(f"{record.msg} {record.args!r}"), ()
        return
    clean = redact(message)
    if clean == message:
        return
    args = record.args
    if isinstance(args, Mapping):
        args = {k: _clean(v) for k, v in args.items()}
    elif isinstance(args, tuple):
        args = tuple(_clean(a) for a in args)
    record.msg, record.args = _clean(record.msg), args
    try:
        again = record.getMessage()
    except Exception:
        again = message
    if redact(again) != again:  # a secret made of the parts: the whole message masked
        record.msg, record.args = clean, ()


def _clean(value: Any) -> Any:
    """An argument as it was, or its masked text if it holds a secret."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else str(value)
    clean = redact(text)
    if clean != text:
        return clean
    if not isinstance(value, str) and redact(shown := repr(value)) != shown:
        return redact(shown)
    return value
