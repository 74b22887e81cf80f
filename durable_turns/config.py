"""Configuration, read from the environment (and overridden by CLI flags).

Every field has a safe default: with nothing set, a worker starts an embedded Temporal dev
server, keeps its data in a per-user folder that does not depend on the current directory
(``$XDG_DATA_HOME/durable-turns``, else ``~/.local/share/durable-turns``; ``TURNS_DATA_DIR``
overrides it) and runs the offline ``demo:`` model. So a worker started in one directory and
``turns chat`` run from another find the same store and the same chunk stream.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, get_args
from urllib.parse import parse_qsl, urlsplit

from durable_turns.contract import (
    DEFAULT_MAX_STEPS,
    DEFAULT_MODEL,
    DEFAULT_TASK_QUEUE,
    MAX_DEBOUNCE_MS,
    MessageConcurrency,
)
from durable_turns.redaction import register

_PRINCIPAL = re.compile(r"[A-Za-z0-9_.@-]+")
"""A principal's name in ``TURNS_HTTP_TOKEN``'s ``name=token``."""

EMBEDDED_HOST = "127.0.0.1"
MAX_CRASH_RETRIES = 50
"""The most ``TURNS_CRASH_RETRIES`` may allow: each worker death costs a heartbeat timeout."""
MAX_LOOP_COALESCE_MS = 50
"""The most ``TURNS_LOOP_COALESCE_MS`` may set: an event waits for the worker's loop at most
this long."""


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def default_data_dir() -> Path:
    """``TURNS_DATA_DIR``, else ``$XDG_DATA_HOME/durable-turns``, else
    ``~/.local/share/durable-turns``: absolute, whatever the current directory."""
    configured = _env("TURNS_DATA_DIR")
    if configured:
        return Path(configured).expanduser().absolute()
    xdg = _env("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return (base / "durable-turns").absolute()


SECRET_QUERY_KEYS = frozenset(
    {
        "password",
        "pass",
        "pwd",
        "key",
        "apikey",
        "api_key",
        "api-key",
        "token",
        "access_token",
        "auth",
        "secret",
        "sig",
        "signature",
    }
)
"""Query parameters whose values are secrets (``?password=…``, ``?key=…``, ``?token=…``)."""


def url_secrets(url: str | None) -> list[str]:
    """The secrets a URL carries: its password (or a lone user name, which may be a token)
    and the values of its :data:`SECRET_QUERY_KEYS` parameters."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return []
    found = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        user, sep, password = userinfo.partition(":")
        found.append(password if sep else user)
    found += [v for k, v in query if k.lower() in SECRET_QUERY_KEYS and v]
    return found


def mask_url(url: str | None) -> str:
    """A URL fit to print: passwords (in the netloc) and the values of secret query
    parameters (:data:`SECRET_QUERY_KEYS`) masked."""
    if not url:
        return "none"
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    masked = url
    if "@" in parts.netloc:
        userinfo, _, host = parts.netloc.rpartition("@")
        user, sep, _password = userinfo.partition(":")
        netloc = f"{user}:***@{host}" if sep else f"***@{host}"  # a lone name may be a token
        masked = masked.replace(parts.netloc, netloc, 1)
    if parts.query:
        query = "&".join(
            f"{k}=***" if k.lower() in SECRET_QUERY_KEYS else f"{k}={v}" if v else k
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        )
        masked = masked.replace(parts.query, query, 1)
    return masked


def http_tokens(spec: str) -> dict[str, str]:
    """``TURNS_HTTP_TOKEN`` read: ``token`` (principal ``default``) or ``alice=tok1,bob=tok2``,
    as ``{token: principal}``."""
    tokens: dict[str, str] = {}
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        name, sep, token = item.partition("=")
        if not (sep and _PRINCIPAL.fullmatch(name) and token.strip("=")):
            # one token (base64 padding included: "abc==" is a token, not "abc" = "=")
            name, token = "default", item
        tokens[token] = name
    if not tokens:
        raise ValueError("TURNS_HTTP_TOKEN is empty")
    return tokens


def _on_off(name: str, default: bool) -> bool:
    """An ``on``/``off`` setting (also 1/0, true/false, yes/no); anything else is an error."""
    value = (_env(name) or "").strip().lower()
    if not value:
        return default
    if value in ("on", "1", "true", "yes"):
        return True
    if value in ("off", "0", "false", "no"):
        return False
    raise ValueError(f"{name} must be on or off, not {value!r}")


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


@dataclass(frozen=True)
class Settings:
    temporal_address: str | None = None
    """TEMPORAL_ADDRESS: a cluster to connect to; unset = the embedded dev server."""
    embedded_port: int = 7233
    """TURNS_EMBEDDED_PORT: the embedded dev server's gRPC port."""
    ui_port: int = 8233
    """TURNS_UI_PORT: the embedded dev server's UI port."""
    ui_url: str | None = None
    """TURNS_UI_URL: the Temporal UI's address, for the links the demo prints when it does
    not run the server itself; unset: found at the server's host on ``ui_port`` if a UI
    answers there."""
    namespace: str = "default"
    """TEMPORAL_NAMESPACE."""
    task_queue: str = DEFAULT_TASK_QUEUE
    """TURNS_TASK_QUEUE."""
    data_dir: Path = field(default_factory=default_data_dir)
    """TURNS_DATA_DIR: the embedded server's, the SQLite store's and the SQLite chunk
    stream's files; default ``$XDG_DATA_HOME/durable-turns`` or
    ``~/.local/share/durable-turns`` (never relative to the current directory)."""
    store_url: str | None = None
    """TURNS_STORE_URL: sqlite:///path or postgresql://…; default SQLite in data_dir."""
    model: str = DEFAULT_MODEL
    """TURNS_MODEL: the default ``provider:model`` id."""
    max_steps: int = DEFAULT_MAX_STEPS
    """TURNS_MAX_STEPS."""
    tools: list[str] = field(default_factory=list)
    """TURNS_TOOLS: comma-separated modules of tools (the demo tools are always there)."""
    hooks: str | None = None
    """TURNS_HOOKS: ``module:Class``, a TurnHooks subclass."""
    transforms: list[str] = field(default_factory=list)
    """TURNS_TRANSFORMS: comma-separated modules of ``@stream_transform`` functions."""
    mcp: list[str] = field(default_factory=list)
    """TURNS_MCP: MCP servers, ``NAME=COMMAND ARGS…`` or ``NAME=https://…``, ``;``-separated."""
    mcp_config: str | None = None
    """TURNS_MCP_CONFIG: a JSON file of MCP servers (``{"mcpServers": {...}}``)."""
    prometheus_bind: str | None = None
    """TURNS_PROMETHEUS_BIND: host:port to serve the Temporal runtime's Prometheus metrics."""
    otel: bool = False
    """TURNS_OTEL=1: OpenTelemetry tracing through Temporal's interceptor (the 'otel' extra)."""
    chunk_stream_url: str | None = None
    """TURNS_CHUNK_STREAM_URL: live chunks: sqlite:///…, redis://…, or none; default SQLite."""
    stream_write_timeout_s: float = 60.0
    """TURNS_STREAM_WRITE_TIMEOUT_S: how long an activity retries a chunk-stream write it
    waits on (a step's end, a tool result, the turn's end) before going on without it."""
    stall_timeout_ms: int = 0
    """TURNS_STALL_TIMEOUT_MS: the stream-stall watchdog's default (0 disables it)."""
    heartbeat_timeout_s: float = 30.0
    """TURNS_HEARTBEAT_TIMEOUT_S: how soon a dead worker's activity is retried elsewhere."""
    step_timeout_s: float = 600.0
    """TURNS_STEP_TIMEOUT_S: the longest one model step may take."""
    client_tool_timeout_s: float = 3600.0
    """TURNS_CLIENT_TOOL_TIMEOUT_S: how long a turn waits for client tool results/approvals."""
    model_retries: int = 2
    """TURNS_MODEL_RETRIES: retries of a failed model step (TurnConfig.max_retries wins)."""
    crash_retries: int = 5
    """TURNS_CRASH_RETRIES: how often one activity of a turn (a model step, a tool call, a
    compaction, ``on_chat_response``) is run again after its worker died (killed, out of
    memory, a native crash, a shutdown past its grace), apart from the model's retries."""
    shutdown_grace_s: float = 10.0
    """TURNS_SHUTDOWN_GRACE_S: on SIGTERM, how long running activities may finish first."""
    cancel_check_ms: int = 500
    """TURNS_CANCEL_CHECK_MS: how soon a model step learns of a cancelChat: each worker reads
    the cancel marks of all its steps every half of it (``streams.cancel``); a step without a
    mark (no chunk stream, a sub-agent's) heartbeats twice per it instead (0: neither)."""
    liveness_ms: int = 1200
    """TURNS_LIVENESS_MS: how long a worker process may miss its liveness beats in the chunk
    stream (one every sixth of it, from a thread of its own) before the other workers
    recover the model steps it ran, without waiting out their heartbeat timeout
    (``streams.liveness``; 0 or ``off``: only the heartbeat timeout)."""
    max_concurrent_activities: int = 200
    """TURNS_MAX_CONCURRENT_ACTIVITIES: the most activities (model steps, tools, hooks) one
    worker process runs at once; past it they wait in the task queue for a free slot (and
    ``turns state`` still answers). Each streaming turn holds one. It is a guard, not a
    throttle: one worker core sustains fewer streaming turns than this (``bench.capacity``),
    so CPU binds first; raise it with the cores a worker process has, lower it to cap
    what one process takes on (memory, a model's rate limit)."""
    demo_dir: Path | None = None
    """TURNS_DEMO_DIR: the folder ``demo:<name>`` script files are read from (by name only);
    unset: only the built-in scripts."""
    http_token: str | None = field(default=None, repr=False)
    """TURNS_HTTP_TOKEN: the front door's bearer token(s): ``token`` or ``name=token,…``
    (one principal per name); unset: no authentication (loopback binds only)."""
    http_models: list[str] = field(default_factory=list)
    """TURNS_HTTP_MODELS: model ids a browser's request may choose (``model`` in the body);
    unset: a browser's ``model`` is ignored."""
    http_origins: list[str] = field(default_factory=list)
    """TURNS_HTTP_ORIGINS: without authentication, origins (``scheme://host[:port]``) besides
    the front door's own whose pages may call it, e.g. a dev server that proxies ``/api``
    and rewrites ``Host``; unset: only the door's own (docs/web.md#security)."""
    http_max_streams: int = 4096
    """TURNS_HTTP_MAX_STREAMS: open SSE responses per front-door process; past it, 503."""
    http_protocol: int = 7
    """TURNS_HTTP_PROTOCOL: the ``ai`` major version the front door's clients run, 7 (the
    default: ``reset-step`` and ``tool-approval-response`` are sent) or 6 (neither: ai 6
    rejects them); a request's ``x-ui-message-stream-version`` header overrides it."""
    http_max_streams_per_principal: int = 256
    """TURNS_HTTP_MAX_STREAMS_PER_PRINCIPAL: one principal's share of them (with
    authentication); past it, 503."""
    http_shutdown_grace_s: float = 5.0
    """TURNS_HTTP_SHUTDOWN_GRACE_S: on SIGTERM, ``turns serve`` ends its open streams at once
    (``data-resume``: the browser resumes elsewhere) and gives requests still in flight this
    long before it cancels them and exits."""
    user_loops: int = 32
    """TURNS_USER_LOOPS: the most event loops (each on its own thread) user ``async def``
    tools, hooks, ``on_chunk`` and stream transforms run on, one call per loop while there are
    enough, so one that blocks delays only its own turn; 0 runs them on the worker's loop
    (at most 256)."""
    loop_coalesce_ms: int = 20
    """TURNS_LOOP_COALESCE_MS: while the worker's event loop is busy (its I/O events coming
    more than twice per interval), it waits for I/O at most once per this many ms and handles
    what came meanwhile in one wake-up (each wake-up of a waiting thread costs CPU of its own:
    ``durable_turns.eventloop``); an event waits at most this long. 0: every event wakes the
    loop at once (at most 50)."""
    workflow_sandbox: bool = False
    """TURNS_WORKFLOW_SANDBOX: ``off`` (the default) runs the engine's own workflows as plain
    code (the SDK's ``UnsandboxedWorkflowRunner``), ``on`` in temporalio's sandbox (its
    restrictions catch a non-deterministic call in workflow code as it runs, at a cost per
    turn: the workflow module re-imported for every run, an ``exec`` per activation). No user
    code runs in a workflow either way; a lint of the workflow modules, the recorded histories
    replayed under both and CI's sandboxed run guard determinism (docs/architecture.md)."""
    message_concurrency: str | None = None
    """TURNS_MESSAGE_CONCURRENCY: the default, for conversations this worker opens, of what a
    message does that arrives while a turn runs or waits: ``queue`` (unset), ``latest``,
    ``merge``, ``drop`` or ``debounce`` (a conversation's or request's own setting wins)."""
    debounce_ms: int | None = None
    """TURNS_DEBOUNCE_MS: the quiet time of ``debounce`` (unset: 750 ms; at most 60,000)."""

    @classmethod
    def from_env(cls) -> Settings:
        tools = _env("TURNS_TOOLS")
        transforms = _env("TURNS_TRANSFORMS")
        return cls(
            temporal_address=_env("TEMPORAL_ADDRESS"),
            embedded_port=int(_env("TURNS_EMBEDDED_PORT", "7233") or 7233),
            ui_port=int(_env("TURNS_UI_PORT", "8233") or 8233),
            ui_url=(_env("TURNS_UI_URL") or "").rstrip("/") or None,
            namespace=_env("TEMPORAL_NAMESPACE", "default") or "default",
            task_queue=_env("TURNS_TASK_QUEUE", DEFAULT_TASK_QUEUE) or DEFAULT_TASK_QUEUE,
            data_dir=default_data_dir(),
            store_url=_env("TURNS_STORE_URL"),
            model=_env("TURNS_MODEL", DEFAULT_MODEL) or DEFAULT_MODEL,
            max_steps=int(_env("TURNS_MAX_STEPS", str(DEFAULT_MAX_STEPS)) or DEFAULT_MAX_STEPS),
            tools=_split(tools),
            hooks=_env("TURNS_HOOKS"),
            transforms=_split(transforms),
            mcp=[v.strip() for v in (_env("TURNS_MCP") or "").split(";") if v.strip()],
            mcp_config=_env("TURNS_MCP_CONFIG"),
            chunk_stream_url=_env("TURNS_CHUNK_STREAM_URL"),
            prometheus_bind=_env("TURNS_PROMETHEUS_BIND"),
            otel=(_env("TURNS_OTEL", "") or "").lower() in ("1", "true", "yes"),
            stream_write_timeout_s=float(_env("TURNS_STREAM_WRITE_TIMEOUT_S", "60") or 60),
            stall_timeout_ms=int(_env("TURNS_STALL_TIMEOUT_MS", "0") or 0),
            heartbeat_timeout_s=float(_env("TURNS_HEARTBEAT_TIMEOUT_S", "30") or 30),
            step_timeout_s=float(_env("TURNS_STEP_TIMEOUT_S", "600") or 600),
            model_retries=int(_env("TURNS_MODEL_RETRIES", "2") or 2),
            crash_retries=int(_env("TURNS_CRASH_RETRIES", "5") or 5),
            client_tool_timeout_s=float(_env("TURNS_CLIENT_TOOL_TIMEOUT_S", "3600") or 3600),
            shutdown_grace_s=float(_env("TURNS_SHUTDOWN_GRACE_S", "10") or 0),
            cancel_check_ms=int(_env("TURNS_CANCEL_CHECK_MS", "500") or 0),
            liveness_ms=_liveness_ms(_env("TURNS_LIVENESS_MS", "1200")),
            max_concurrent_activities=int(_env("TURNS_MAX_CONCURRENT_ACTIVITIES", "200") or 200),
            demo_dir=Path(demo) if (demo := _env("TURNS_DEMO_DIR")) else None,
            http_token=_env("TURNS_HTTP_TOKEN"),
            http_models=_split(_env("TURNS_HTTP_MODELS")),
            http_origins=_split(_env("TURNS_HTTP_ORIGINS")),
            http_max_streams=int(_env("TURNS_HTTP_MAX_STREAMS", "4096") or 4096),
            http_protocol=int(_env("TURNS_HTTP_PROTOCOL", "7") or 7),
            http_max_streams_per_principal=int(
                _env("TURNS_HTTP_MAX_STREAMS_PER_PRINCIPAL", "256") or 256
            ),
            http_shutdown_grace_s=float(_env("TURNS_HTTP_SHUTDOWN_GRACE_S", "5") or 0),
            user_loops=int(_env("TURNS_USER_LOOPS", "32") or 0),
            loop_coalesce_ms=int(_env("TURNS_LOOP_COALESCE_MS", "20") or 0),
            workflow_sandbox=_on_off("TURNS_WORKFLOW_SANDBOX", False),
            message_concurrency=_env("TURNS_MESSAGE_CONCURRENCY") or None,
            debounce_ms=int(ms) if (ms := _env("TURNS_DEBOUNCE_MS")) else None,
        )

    def __post_init__(self) -> None:
        # the secrets configured here are masked in every log record from now on
        register(*url_secrets(self.store_url), *url_secrets(self.chunk_stream_url))
        if self.http_token:
            register(*http_tokens(self.http_token))
        if self.max_steps < 1:
            raise ValueError("TURNS_MAX_STEPS must be at least 1")
        if self.stall_timeout_ms < 0:
            raise ValueError("TURNS_STALL_TIMEOUT_MS must be 0 (off) or positive")
        if self.stream_write_timeout_s <= 0:
            raise ValueError("TURNS_STREAM_WRITE_TIMEOUT_S must be positive")
        if self.heartbeat_timeout_s <= 0:
            raise ValueError("TURNS_HEARTBEAT_TIMEOUT_S must be positive")
        if not 0 <= self.user_loops <= 256:
            raise ValueError("TURNS_USER_LOOPS must be 0 (off) to 256")
        if not 0 <= self.loop_coalesce_ms <= MAX_LOOP_COALESCE_MS:
            raise ValueError(f"TURNS_LOOP_COALESCE_MS must be 0 (off) to {MAX_LOOP_COALESCE_MS}")
        if self.message_concurrency not in (None, *get_args(MessageConcurrency)):
            raise ValueError(
                "TURNS_MESSAGE_CONCURRENCY must be one of "
                + ", ".join(get_args(MessageConcurrency))
            )
        if self.debounce_ms is not None and not 0 <= self.debounce_ms <= MAX_DEBOUNCE_MS:
            raise ValueError(f"TURNS_DEBOUNCE_MS must be 0 to {MAX_DEBOUNCE_MS}")
        if not 0 <= self.crash_retries <= MAX_CRASH_RETRIES:
            raise ValueError(f"TURNS_CRASH_RETRIES must be between 0 and {MAX_CRASH_RETRIES}")
        if self.max_concurrent_activities < 1:
            raise ValueError("TURNS_MAX_CONCURRENT_ACTIVITIES must be at least 1")
        if not 0 <= self.http_shutdown_grace_s <= 600:
            raise ValueError("TURNS_HTTP_SHUTDOWN_GRACE_S must be 0 to 600 (seconds)")
        if self.http_protocol not in (6, 7):
            raise ValueError("TURNS_HTTP_PROTOCOL must be 6 or 7 (the ai package's major version)")

    @property
    def embedded(self) -> bool:
        return self.temporal_address is None

    @property
    def address(self) -> str:
        return self.temporal_address or f"{EMBEDDED_HOST}:{self.embedded_port}"

    @property
    def resolved_store_url(self) -> str:
        return self.store_url or f"sqlite:///{self.data_dir / 'transcripts.db'}"

    @property
    def resolved_chunk_stream_url(self) -> str:
        return self.chunk_stream_url or f"sqlite:///{self.data_dir / 'chunks.db'}"

    def with_overrides(self, **changes: Any) -> Settings:
        known = {f.name for f in fields(self)}
        return replace(self, **{k: v for k, v in changes.items() if k in known and v is not None})


def _liveness_ms(value: str | None) -> int:
    text = (value or "").strip().lower()
    if text in ("", "off", "0", "false", "no"):
        return 0
    return int(text)
