"""Tools from MCP servers: configuration, a pooled session per server, and their tools.

A worker is given MCP servers by name (``turns worker --mcp NAME=COMMAND ARGS…`` or
``--mcp NAME=https://…``, ``TURNS_MCP`` with ``;`` between servers, or a JSON file named by
``--mcp-config`` / ``TURNS_MCP_CONFIG``). Each server's tools join the worker's registry as
``mcp__<server>__<tool>`` and run like any tool: inside the ``tool_call`` activity, bounded by
their timeout, with the tool call id as an idempotency key (sent in the request's ``_meta``).

One session per server and worker process: the tool list is fetched when it connects and on
``notifications/tools/list_changed``; a stdio server that died is started again, and an HTTP
server that dropped (or no longer knows the session) is reconnected, on the next call. A
server that cannot be reached makes its tools fail with ``McpServerUnavailable``, and one
that breaks the protocol (a line that is no JSON-RPC message, an answer to a request never
sent, a result that is no tool result) with ``McpProtocolError``: error results the model
sees, never the worker's end. A cancelled call is cancelled at the server too (the SDK sends
``notifications/cancelled``).

The annotations set each tool's defaults, read with the MCP spec's defaults: retry-safe when
``readOnlyHint`` or ``idempotentHint``; waits for approval unless ``readOnlyHint`` or
``destructiveHint: false`` (``approval`` and per-tool ``tools`` in the config change that).

Why it is long (about 850 lines): it is the whole client side of MCP (configuration, the
session with its reconnects over stdio and HTTP, the tools it makes), of which the worker
imports only ``McpPool``, ``McpServerConfig`` and ``servers_from``; the configuration half
(``ToolOverride`` to ``split_env``) is the seam to split along if it grows.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from durable_turns.config import mask_url, url_secrets
from durable_turns.errors import DurableTurnsError, McpError, McpProtocolError, McpServerUnavailable
from durable_turns.messages import ToolSpec
from durable_turns.redaction import redact, register
from durable_turns.tools import Tool, ToolContext, ToolFailed, ToolRegistry

log = logging.getLogger("durable_turns.mcp")

PREFIX = "mcp"
MAX_NAME = 64
"""Anthropic's and OpenAI's limit on a tool name (``^[a-zA-Z0-9_-]{1,64}$``)."""
META_CALL_ID = "durable-turns/tool-call-id"
META_ATTEMPT = "durable-turns/attempt"
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_CONNECT_TIMEOUT_S = 30.0

_SERVER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*$")
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

_PLAIN_HEADERS = frozenset({"accept", "accept-language", "content-type", "user-agent"})
"""Headers that carry no secret: their values are not masked (unless a ``${VAR}`` fills one)."""

Approval = Literal["destructive", "explicit", "always", "never"]
APPROVALS = ("destructive", "explicit", "always", "never")


@dataclass(frozen=True)
class ToolOverride:
    """One tool's settings in a server's ``tools`` (by the server's name for it), over the
    server's ``approval`` and ``retry_safe`` and the tool's annotations."""

    approval: bool | None = None
    retry_safe: bool | None = None


def tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, fit for every provider: characters outside
    ``[A-Za-z0-9_-]`` become ``_``; a name that changed so, or is over 64 characters, is cut
    to 55 and ends in ``_`` and 8 hex digits of the SHA-256 of the full name (deterministic)."""
    raw = f"{PREFIX}__{server}__{tool}"
    clean = _NOT_ALLOWED.sub("_", raw)
    if clean == raw and len(clean) <= MAX_NAME:
        return clean
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{clean[: MAX_NAME - 9]}_{digest}"


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server: ``command`` (stdio) or ``url`` (streamable HTTP). Strings may hold
    ``${VAR}``, filled in from the worker's environment when it connects (never printed)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Each call's limit (the tools' ``timeout_s``)."""
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    approval: Approval = "destructive"
    """Which tools need the user's approval: ``destructive``, those the annotations do not
    say are harmless (the MCP spec's defaults: a tool is destructive unless it says
    ``readOnlyHint: true`` or ``destructiveHint: false``); ``explicit``, only those that say
    ``destructiveHint: true``; ``always``; ``never``."""
    retry_safe: bool | None = None
    """None: from the annotations (``readOnlyHint`` or ``idempotentHint``)."""
    retries: int = 0
    tools: dict[str, ToolOverride] = field(default_factory=dict)
    """Per tool (the server's name for it): ``approval`` and ``retry_safe`` overrides."""

    def __post_init__(self) -> None:
        if not _SERVER_NAME.match(self.name):
            raise ValueError(
                f"MCP server name {self.name!r}: letters, digits, '-' and single '_' only"
            )
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r}: give a command or a url (one of them)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server {self.name!r}: the url must be http:// or https://")
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError(f"MCP server {self.name!r}: timeouts must be positive")
        if self.approval not in APPROVALS:
            raise ValueError(f"MCP server {self.name!r}: approval is one of {', '.join(APPROVALS)}")
        if not 0 <= self.retries <= 2:
            raise ValueError(f"MCP server {self.name!r}: retries is 0, 1 or 2")

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def describe(self) -> str:
        """What the ready line says: the templates, never a filled-in secret."""
        if self.command is not None:
            return "stdio: " + shlex.join([self.command, *self.args])
        return f"http: {mask_url(self.url)}"

    def resolved(self) -> tuple[McpServerConfig, list[str]]:
        """The config with every ``${VAR}`` filled in, and the values filled in. A variable
        that is not set is an error naming it. Its secrets are masked in every log record and
        error text from now on (``durable_turns.redaction``): every value filled in, every
        ``env`` and header value (and each word of one: the token of ``Bearer <token>``; not
        ``Accept``, ``Content-Type`` and the like), and the URL's password and secret query
        values."""
        secrets: list[str] = []

        def fill(text: str) -> str:
            def one(m: re.Match[str]) -> str:
                value = os.environ.get(m.group(1))
                if value is None:
                    raise ValueError(
                        f"MCP server {self.name!r}: environment variable {m.group(1)} is not set"
                    )
                if value:
                    secrets.append(value)
                return value

            return _VAR.sub(one, text)

        done = replace(
            self,
            command=fill(self.command) if self.command is not None else None,
            args=tuple(fill(a) for a in self.args),
            env={k: fill(v) for k, v in self.env.items()},
            cwd=fill(self.cwd) if self.cwd is not None else None,
            url=fill(self.url) if self.url is not None else None,
            headers={k: fill(v) for k, v in self.headers.items()},
        )
        plain = [v for k, v in done.headers.items() if k.lower() in _PLAIN_HEADERS]
        values = [*done.env.values(), *(v for v in done.headers.values() if v not in plain)]
        register(*secrets, *values, *(w for v in values for w in v.split()))
        register(*url_secrets(done.url))
        return done, secrets


def parse_spec(spec: str) -> McpServerConfig:
    """``NAME=COMMAND ARGS…`` (stdio; shell-style quoting) or ``NAME=https://…``."""
    name, sep, rest = spec.strip().partition("=")
    rest = rest.strip()
    if not sep or not name.strip() or not rest:
        raise ValueError(f"--mcp takes NAME=COMMAND ARGS… or NAME=URL, got {spec!r}")
    if rest.startswith(("http://", "https://")):
        return McpServerConfig(name=name.strip(), url=rest)
    words = shlex.split(rest)
    return McpServerConfig(name=name.strip(), command=words[0], args=tuple(words[1:]))


_FILE_KEYS = {
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "timeout_s",
    "connect_timeout_s",
    "approval",
    "retry_safe",
    "retries",
    "tools",
    "type",
}
_TOOL_KEYS = {"approval", "retry_safe"}


def _overrides(path: str | Path, name: str, raw: Any) -> dict[str, ToolOverride]:
    """A server's ``tools``: ``{TOOL: {"approval": bool, "retry_safe": bool}}``."""
    where = f"MCP config {path}: server {name!r}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: tools is an object of tool names")
    out = {}
    for tool, entry in raw.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: tools[{tool!r}] is not an object")
        unknown = sorted(set(entry) - _TOOL_KEYS)
        if unknown:
            raise ValueError(f"{where}: tools[{tool!r}] has unknown keys {unknown}")
        for key, value in entry.items():
            if not isinstance(value, bool):
                raise ValueError(f"{where}: tools[{tool!r}].{key} is true or false")
        out[str(tool)] = ToolOverride(entry.get("approval"), entry.get("retry_safe"))
    return out


def load_config_file(path: str | Path) -> list[McpServerConfig]:
    """``{"mcpServers": {NAME: {"command", "args", "env", "cwd"} | {"url", "headers"}}}``,
    each with optional ``timeout_s``, ``connect_timeout_s``, ``approval``, ``retry_safe``,
    ``retries`` and ``tools`` (per-tool ``approval`` and ``retry_safe``)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"MCP config {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"MCP config {path}: not JSON ({e})") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ValueError(f'MCP config {path}: expected {{"mcpServers": {{NAME: {{...}}}}}}')
    out = []
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise ValueError(f"MCP config {path}: server {name!r} is not an object")
        unknown = sorted(set(entry) - _FILE_KEYS)
        if unknown:
            raise ValueError(f"MCP config {path}: server {name!r} has unknown keys {unknown}")
        try:
            out.append(
                McpServerConfig(
                    name=name,
                    command=entry.get("command"),
                    args=tuple(str(a) for a in entry.get("args", [])),
                    env={str(k): str(v) for k, v in entry.get("env", {}).items()},
                    cwd=entry.get("cwd"),
                    url=entry.get("url"),
                    headers={str(k): str(v) for k, v in entry.get("headers", {}).items()},
                    timeout_s=float(entry.get("timeout_s", DEFAULT_TIMEOUT_S)),
                    connect_timeout_s=float(
                        entry.get("connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S)
                    ),
                    approval=entry.get("approval", "destructive"),
                    retry_safe=entry.get("retry_safe"),
                    retries=int(entry.get("retries", 0)),
                    tools=_overrides(path, name, entry.get("tools", {})),
                )
            )
        except (TypeError, AttributeError) as e:
            raise ValueError(f"MCP config {path}: server {name!r}: {e}") from None
    return out


def servers_from(specs: list[str], config_file: str | None) -> list[McpServerConfig]:
    """The servers a worker is given (``--mcp``/``TURNS_MCP`` and the config file), checked:
    names unique, every ``${VAR}`` set."""
    servers = [parse_spec(s) for s in specs]
    if config_file:
        servers += load_config_file(config_file)
    seen: set[str] = set()
    for s in servers:
        if s.name in seen:
            raise ValueError(f"two MCP servers are named {s.name!r}")
        seen.add(s.name)
        s.resolved()  # a missing variable fails now, before anything starts
    return servers


def split_env(value: str | None) -> list[str]:
    """``TURNS_MCP``: servers separated by ``;``."""
    return [v.strip() for v in value.split(";") if v.strip()] if value else []


class _McpArgs(BaseModel):
    """Any object: the server validates its own input."""

    model_config = ConfigDict(extra="allow")


@dataclass
class McpTool(Tool):
    """A tool of an MCP server; the model sees the server's own input schema."""

    server: str = ""
    remote_name: str = ""
    schema: dict[str, Any] = field(default_factory=dict)
    isolated: bool = False
    """The engine's own client of the server, bound to the worker's loop: it never blocks."""

    @functools.cached_property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, input_schema=self.schema)


def _stable(value: Any) -> Any:
    """A JSON value with every object's keys sorted: the same schema text on every worker."""
    if isinstance(value, dict):
        return {k: _stable(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _schema(raw: dict[str, Any] | None) -> dict[str, Any]:
    schema = dict(raw or {})
    for key in ("title", "$schema"):
        schema.pop(key, None)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return _stable(schema)


def result_output(result: Any) -> Any:
    """A ``CallToolResult`` as the tool's output: ``structuredContent`` when present (the
    Python SDK's lone ``result`` key unwrapped); else the text when all content is text;
    else a list of parts (images and binary resources summarized, never their bytes)."""
    structured = result.structured_content
    if structured is not None and not result.is_error:
        if isinstance(structured, dict) and list(structured) == ["result"]:
            return structured["result"]
        return structured
    parts = [_part(c) for c in result.content]
    if all(p.get("type") == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _part(content: Any) -> dict[str, Any]:
    kind = getattr(content, "type", None)
    if kind == "text":
        return {"type": "text", "text": content.text}
    if kind in ("image", "audio"):
        size = len(content.data) * 3 // 4
        return {"type": kind, "mime_type": content.mime_type, "bytes": size}
    if kind == "resource":
        res = content.resource
        part: dict[str, Any] = {"type": "resource", "uri": str(res.uri), "mime_type": res.mime_type}
        if getattr(res, "text", None) is not None:
            part["text"] = res.text
        else:
            part["bytes"] = len(getattr(res, "blob", "") or "") * 3 // 4
        return part
    if kind == "resource_link":
        return {"type": "resource_link", "uri": str(content.uri), "name": content.name}
    return {"type": str(kind)}


class _Live:
    """One session of a connection: what it sent, what of it is unanswered, and whether the
    server broke the protocol while a call was running on it."""

    def __init__(self) -> None:
        self.session: Any = None
        self.unanswered: set[str] = set()
        """Ids of requests sent and not answered yet (a late answer to an abandoned one is
        still an answer)."""
        self.answered: collections.deque[str] = collections.deque(maxlen=1024)
        """The last ids answered: an answer again (a replayed stream) is no fault."""
        self.calls = 0
        """Tool calls running on this session now."""
        self.fault = asyncio.Event()
        self.fault_text = ""


class _Reads:
    """The transport's read stream as the session sees it, each item shown to ``seen``."""

    def __init__(self, inner: Any, seen: Callable[[Any], None]) -> None:
        self._inner = inner
        self._seen = seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> _Reads:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    def __aiter__(self) -> _Reads:
        return self

    async def __anext__(self) -> Any:
        item = await self._inner.__anext__()
        self._seen(item)
        return item

    async def receive(self) -> Any:
        item = await self._inner.receive()
        self._seen(item)
        return item


class _Writes:
    """The transport's write stream as the session sees it, each message shown to ``sent``."""

    def __init__(self, inner: Any, sent: Callable[[Any], None]) -> None:
        self._inner = inner
        self._sent = sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> _Writes:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    async def send(self, item: Any) -> None:
        self._sent(item)
        await self._inner.send(item)


class _SessionLost(DurableTurnsError):
    """An HTTP server refused the call for its session (it restarted, or expired it)."""

    def __init__(self, text: str, unprocessed: bool) -> None:
        super().__init__(text)
        self.unprocessed = unprocessed
        """The server said so (404): the call did not run."""


class McpConnection:
    """One server's session in this worker, run by a task of its own (the SDK's transports
    are entered and left in one task); restarted on the next call after it died."""

    def __init__(self, config: McpServerConfig, on_tools: Callable[[McpConnection], None]) -> None:
        self.config = config
        self.tools: list[Any] = []
        self.error: str | None = None
        self._on_tools = on_tools
        self._live: _Live | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._secrets: list[str] = []
        self._background: set[asyncio.Task[Any]] = set()

    @property
    def alive(self) -> bool:
        return self._live is not None and self._task is not None and not self._task.done()

    def scrub(self, text: str) -> str:
        """``text`` without any secret (the values filled in, short ones too)."""
        return redact(text, *self._secrets)

    async def session(self) -> Any:
        """The live session, connecting (again) first if there is none."""
        return (await self._connect()).session

    async def _connect(self) -> _Live:
        if self.alive:
            assert self._live is not None
            return self._live
        async with self._lock:
            if self.alive:
                assert self._live is not None
                return self._live
            await self._close_task()
            self._stop = asyncio.Event()
            ready: asyncio.Future[_Live] = asyncio.get_running_loop().create_future()
            self._task = asyncio.create_task(self._run(ready), name=f"mcp {self.config.name}")
            try:
                async with asyncio.timeout(self.config.connect_timeout_s):
                    return await asyncio.shield(ready)
            except TimeoutError:
                self._stop.set()
                self.error = f"no answer within {self.config.connect_timeout_s:g}s"
            except Exception as e:
                self.error = self.scrub(_describe(e))
            raise McpServerUnavailable(
                f"MCP server {self.config.name!r} is not reachable: {self.error}"
            )

    async def _run(self, ready: asyncio.Future[_Live]) -> None:
        from mcp import ClientSession

        config, self._secrets = self.config.resolved()
        live = _Live()
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(_transport(config))
                reads = _Reads(read, functools.partial(self._inbound, live))
                writes = _Writes(write, functools.partial(_outbound, live))
                session = await stack.enter_async_context(
                    ClientSession(reads, writes, message_handler=self._on_message)
                )
                await session.initialize()
                self.tools = await _list_tools(session)
                live.session, self._live, self.error = session, live, None
                ready.set_result(live)
                self._on_tools(self)
                await self._stop.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
            elif not isinstance(e, asyncio.CancelledError):
                log.warning("MCP server %s: session ended: %s", config.name, self.scrub(str(e)))
            if not isinstance(e, Exception):
                raise
        finally:
            if self._live is live:
                self._live = None

    def _inbound(self, live: _Live, item: Any) -> None:
        """What the server sent, before the session reads it: a line that is no JSON-RPC
        message, or an answer to a request never sent, breaks the protocol."""
        from mcp.types import JSONRPCError, JSONRPCResponse

        if isinstance(item, Exception):
            self._broken(live, "sent something that is not a JSON-RPC message: " + _brief(item))
            return
        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            key = str(message.id)
            if key in live.unanswered:
                live.unanswered.discard(key)
                live.answered.append(key)
            elif key in live.answered:
                log.info("MCP server %s answered request %s again", self.config.name, key)
            else:
                self._broken(live, f"answered a request that was never sent (id {message.id!r})")

    def _broken(self, live: _Live, what: str) -> None:
        text = self.scrub(what if len(what) <= 300 else what[:300] + "…")
        if live.calls == 0:  # e.g. a banner at start: said, and let be
            log.warning("MCP server %s %s (no call was running)", self.config.name, text)
            return
        log.warning(
            "MCP server %s %s: its running calls fail, the session is started anew",
            self.config.name,
            text,
        )
        if not live.fault.is_set():
            live.fault_text = text
            live.fault.set()
        self.dead(live)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):  # said by _inbound, which saw it first
            return
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            task = asyncio.create_task(self._refresh())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _refresh(self) -> None:
        live = self._live
        if live is None:
            return
        try:
            self.tools = await _list_tools(live.session)
        except Exception as e:
            log.warning("MCP server %s: listing tools failed: %s", self.config.name, e)
            return
        log.info("MCP server %s: tool list changed (%d tools)", self.config.name, len(self.tools))
        self._on_tools(self)

    def dead(self, live: _Live | None = None) -> None:
        """The session (``live``, or whichever is current) is broken: the next call starts a
        new one."""
        if live is not None and live is not self._live:
            return
        self._live = None
        self._stop.set()

    async def call(
        self, name: str, arguments: dict[str, Any], ctx: ToolContext, retry_safe: bool = False
    ) -> Any:
        """One ``tools/call``. A call an HTTP server refused for a session it no longer knows
        is sent once more on a new session when it cannot have run (404) or is retry-safe."""
        try:
            return await self._call(await self._connect(), name, arguments, ctx)
        except _SessionLost as e:
            if not (e.unprocessed or retry_safe):
                raise McpServerUnavailable(str(e)) from None
            log.info("%s; calling again on a new session", e)
        try:
            return await self._call(await self._connect(), name, arguments, ctx)
        except _SessionLost as e:
            raise McpServerUnavailable(str(e)) from None

    async def _call(
        self, live: _Live, name: str, arguments: dict[str, Any], ctx: ToolContext
    ) -> Any:
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED, INTERNAL_ERROR
        from pydantic import ValidationError

        server = self.config.name
        meta = {META_CALL_ID: ctx.tool_call_id, META_ATTEMPT: ctx.attempt}
        # The tool's timeout_s (the activity's) ends a call first, as the ToolTimeout every
        # tool gets; the SDK's own read timeout only backs it up.
        live.calls += 1
        request = asyncio.ensure_future(
            live.session.call_tool(
                name, arguments, read_timeout_seconds=self.config.timeout_s + 5, meta=meta
            )
        )
        fault = asyncio.ensure_future(live.fault.wait())
        try:
            await asyncio.wait({request, fault}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # cancelled too: the SDK tells the server (notifications/cancelled)
            live.calls -= 1
            fault.cancel()
            if not request.done():
                request.cancel()
                with contextlib.suppress(BaseException):
                    await request
        answered = not request.cancelled() and request.exception() is None
        if live.fault.is_set() and not answered:
            raise McpProtocolError(
                f"MCP server {server!r} {live.fault_text} (the session is started anew)"
            )
        try:
            return request.result()
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                self.dead(live)
                again = "reconnected" if self.config.transport == "http" else "started again"
                raise McpServerUnavailable(
                    f"MCP server {server!r} closed the connection during the call"
                    f" (it is {again} on the next call)"
                ) from None
            message = self.scrub(e.message)
            if self.config.transport == "http" and (
                "session" in message.lower()
                or (e.code == INTERNAL_ERROR and message == "Server returned an error response")
            ):
                self.dead(live)
                raise _SessionLost(
                    f"MCP server {server!r} refused the session ({message})",
                    unprocessed=message == "Session terminated",
                ) from None
            raise McpError(message) from None
        except (ValidationError, RuntimeError) as e:  # an answer that is no tools/call result
            raise McpProtocolError(
                f"MCP server {server!r} answered with something that is not a tool result: "
                + self.scrub(_brief(e))
            ) from None
        except Exception as e:  # the transport broke: a new session next time
            self.dead(live)
            raise McpServerUnavailable(
                f"MCP server {server!r} failed during the call: " + self.scrub(_describe(e))
            ) from None

    async def _close_task(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        try:
            async with asyncio.timeout(5):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        except BaseException:
            pass

    async def aclose(self) -> None:
        self._live = None
        await self._close_task()
        for task in list(self._background):
            task.cancel()


def _outbound(live: _Live, item: Any) -> None:
    from mcp.types import JSONRPCRequest

    message = getattr(item, "message", None)
    if isinstance(message, JSONRPCRequest):
        live.unanswered.add(str(message.id))


def _brief(e: BaseException) -> str:
    """An error in a line: pydantic's first problem and the input it was about."""
    from pydantic import ValidationError

    if not isinstance(e, ValidationError) or not e.errors():
        text = _describe(e)
        return text if len(text) <= 200 else text[:200] + "…"
    first = e.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    got = repr(first.get("input"))
    got = got if len(got) <= 120 else got[:120] + "…"
    return f"{where + ': ' if where else ''}{first['msg']} (got {got})"


def _describe(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup) and e.exceptions:
        return _describe(e.exceptions[0])
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _transport(config: McpServerConfig) -> Any:
    if config.command is not None:
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=config.command, args=list(config.args), env=config.env, cwd=config.cwd
        )
        return stdio_client(params)
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    assert config.url is not None
    # The client the MCP SDK makes by default (its factory is private), with the server's
    # headers: its timeouts, 30 s, and 300 s for a read (a response stream may stay open).
    client = httpx2.AsyncClient(headers=config.headers, timeout=httpx2.Timeout(30.0, read=300.0))
    return _owning(client, streamable_http_client(config.url, http_client=client))


@contextlib.asynccontextmanager
async def _owning(client: Any, transport: Any) -> Any:
    async with client, transport as streams:
        yield streams


async def _list_tools(session: Any) -> list[Any]:
    from mcp.types import PaginatedRequestParams

    tools: list[Any] = []
    cursor = None
    while True:
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return sorted(tools, key=lambda t: t.name)


def tool_policy(config: McpServerConfig, name: str, hints: Any) -> tuple[bool, bool]:
    """(retry-safe, needs approval) for the server's tool ``name`` with these annotations:
    the tool's override, else the server's setting, else the annotations, read with the MCP
    spec's defaults (``readOnlyHint`` false, ``destructiveHint`` true, ``idempotentHint``
    false)."""
    read_only = bool(hints and hints.read_only_hint)
    idempotent = bool(hints and hints.idempotent_hint)
    said = hints.destructive_hint if hints is not None else None
    retry_safe = read_only or idempotent
    if config.retry_safe is not None:
        retry_safe = config.retry_safe
    approval = {
        "destructive": not read_only and said is not False,
        "explicit": not read_only and said is True,
        "always": True,
        "never": False,
    }[config.approval]
    override = config.tools.get(name)
    if override is not None:
        if override.retry_safe is not None:
            retry_safe = override.retry_safe
        if override.approval is not None:
            approval = override.approval
    return retry_safe, approval


def _scrubbed(conn: McpConnection, value: Any) -> Any:
    """A JSON value with every secret masked in its strings."""
    if isinstance(value, str):
        return conn.scrub(value)
    if isinstance(value, list):
        return [_scrubbed(conn, v) for v in value]
    if isinstance(value, dict):
        return {k: _scrubbed(conn, v) for k, v in value.items()}
    return value


def make_tool(config: McpServerConfig, remote: Any, conn: McpConnection) -> McpTool:
    remote_name = remote.name
    retry_safe, needs_approval = tool_policy(config, remote_name, remote.annotations)

    async def run(args: _McpArgs, ctx: ToolContext) -> Any:
        result = await conn.call(remote_name, args.model_dump(mode="json"), ctx, retry_safe)
        output = result_output(result)
        if result.is_error:  # a server that echoes its credentials in an error says none
            raise ToolFailed(_scrubbed(conn, output))
        return output

    return McpTool(
        name=tool_name(config.name, remote_name),
        description=(remote.description or remote.title or "").strip(),
        input_model=_McpArgs,
        fn=run,
        retry_safe=retry_safe,
        needs_approval=needs_approval,
        timeout_s=config.timeout_s,
        retries=config.retries if retry_safe else 0,
        _context_param="ctx",
        _input_param="args",
        server=config.name,
        remote_name=remote_name,
        schema=_schema(remote.input_schema),
    )


class McpPool:
    """The worker's MCP sessions, one per server, and their tools in ``registry``."""

    def __init__(self, servers: list[McpServerConfig], registry: ToolRegistry) -> None:
        self.registry = registry
        self.connections = [McpConnection(s, self._register) for s in servers]
        self._retry: set[asyncio.Task[None]] = set()
        self._clash: ValueError | None = None

    def _register(self, conn: McpConnection) -> None:
        tools = [make_tool(conn.config, t, conn) for t in conn.tools]
        unknown = sorted(set(conn.config.tools) - {t.name for t in conn.tools})
        if unknown:
            log.warning(
                "MCP server %s has no tools %s (named in its tools)", conn.config.name, unknown
            )
        try:
            self.registry.set_group(conn.config.name, tools)
        except ValueError as e:
            self._clash = e
            log.error("MCP server %s: %s", conn.config.name, e)

    async def start(self) -> None:
        """Connect to every server at once. A clash with a local tool's name stops the worker;
        a server that is down is said in the log and tried again in the background."""
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise ValueError(
                "MCP servers need the 'mcp' extra: pip install 'durable-turns[mcp]'"
            ) from None
        results = await asyncio.gather(
            *(c.session() for c in self.connections), return_exceptions=True
        )
        if self._clash is not None:
            await self.aclose()
            raise self._clash
        for conn, result in zip(self.connections, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("%s; trying again in the background", result)
                task = asyncio.create_task(self._keep_trying(conn))
                self._retry.add(task)
                task.add_done_callback(self._retry.discard)

    async def _keep_trying(self, conn: McpConnection) -> None:
        delay = 1.0
        while True:
            await asyncio.sleep(delay)
            try:
                await conn.session()
            except McpServerUnavailable:
                delay = min(delay * 2, 60.0)
                continue
            log.info("MCP server %s: connected (%d tools)", conn.config.name, len(conn.tools))
            return

    def describe(self) -> list[str]:
        lines = []
        for c in self.connections:
            state = f"{len(c.tools)} tools" if c.alive else f"down ({c.error})"
            lines.append(f"{c.config.name} ({c.config.describe()}) · {state}")
        return lines

    async def aclose(self) -> None:
        for task in list(self._retry):
            task.cancel()
        await asyncio.gather(*(c.aclose() for c in self.connections), return_exceptions=True)
