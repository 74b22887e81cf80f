"""A local stand-in for the Anthropic and OpenAI HTTP APIs that replays recorded fixtures.

Why: the provider tests should drive the real SDK clients over real HTTP (headers, SSE
framing, error bodies, status codes), with no network and no keys. The server speaks just
enough HTTP/1.1 for that (stdlib asyncio, in a thread of its own, so it serves a test's
event loop and other processes alike), and records every request so a test can assert on
what the SDK sent.

Routes: ``POST /v1/messages`` (Anthropic), ``POST /v1/chat/completions`` and
``POST /v1/responses`` (OpenAI) answer with the next scripted ``Reply``; ``/_control/…``
lets another process script it.

In pytest::

    server = LLMServer().start()
    server.push(Reply("anthropic/text_basic.sse"))
    provider = AnthropicProvider(api_key="test-key", base_url=server.base_url)
    ...
    server.requests[-1].body
    server.stop()

For a worker subprocess, point it at the server (``ANTHROPIC_BASE_URL=server.base_url``,
``OPENAI_BASE_URL=server.openai_base_url``) and queue the replies it will get, in order:
``server.push(Reply("openai/chat_text.sse", times=3))``. A process without the object
scripts it over HTTP: ``POST /_control/script`` with a reply (or a list) as JSON, ``GET
/_control/requests``, ``POST /_control/reset``. ``python -m testkit.llm_server --port 8765``
runs it on its own. An Anthropic request that ends with an assistant prefill (a step going
on from what a lost attempt streamed) gets the scripted reply's text after the prefill; so
does a Chat Completions request whose last assistant message is one in the style
``openai_prefill`` names (as a compatible server continues it: ``continue``, ``vllm``,
``prefix``; None, the default, answers as OpenAI does, with the reply whole).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from http import HTTPStatus
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "llm"
API_PATHS = ("/v1/messages", "/v1/chat/completions", "/v1/responses")


@dataclass
class Reply:
    """One scripted answer.

    ``fixture`` is a path under ``testkit/fixtures/llm``: ``.sse`` files stream as
    ``text/event-stream``, ``.json`` files are error bodies whose status defaults to the
    file name's leading number (``529_overloaded.json`` → 529) and whose sibling
    ``<name>.headers.json`` adds headers. ``body`` replaces the fixture's content.
    """

    fixture: str | None = None
    body: str | None = None
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1
    """How many requests this reply answers."""
    stall_after_events: int | None = None
    """Send this many SSE events, then go silent for ``stall_s`` (or until the client leaves)."""
    stall_s: float = 30.0
    drop_after_events: int | None = None
    """Send this many SSE events, then close the connection mid-body."""
    event_delay_s: float = 0.0
    first_token_s: float = 0.0
    """Pace: the first token event (a text or argument delta) is sent this long after the
    response's head, token ``k`` at ``first_token_s + k / tokens_per_s``. The times are
    from the head, not from the event before, so a busy loop does not drift the pace."""
    tokens_per_s: float = 0.0
    """Pace: token events per second after the first (0: as fast as the socket takes them)."""

    def content(self) -> str:
        if self.body is not None:
            return self.body
        if self.fixture is None:
            raise ValueError("a Reply needs a fixture or a body")
        return (FIXTURES / self.fixture).read_text()

    def is_sse(self) -> bool:
        if self.fixture is not None and self.body is None:
            return self.fixture.endswith(".sse")
        return self.content().lstrip().startswith(("event:", "data:"))

    def status_code(self) -> int:
        if self.status is not None:
            return self.status
        name = Path(self.fixture or "").name
        return int(name[:3]) if name[:3].isdigit() else 200

    def all_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.fixture and self.fixture.endswith(".json"):
            sibling = FIXTURES / self.fixture.replace(".json", ".headers.json")
            if sibling.exists():
                headers.update(json.loads(sibling.read_text()))
        headers.update(self.headers)
        return headers


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: str = field(default="", repr=False)
    """The body as sent, for byte-level comparisons."""


class LLMServer:
    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, openai_prefill: str | None = None
    ) -> None:
        self.host = host
        self.port = port
        self.openai_prefill = openai_prefill
        """The Chat Completions prefill this server continues (``_chat_prefill``): ``continue``
        (a last assistant message, as llama.cpp or Ollama), ``vllm`` (one with
        ``continue_final_message`` and no generation prompt), ``prefix`` (one marked
        ``"prefix": true``, as DeepSeek or Mistral); None: none (OpenAI's own API)."""
        self.requests: list[Recorded] = []
        self.default: Reply | None = None
        """Answers when the queue is empty (otherwise: a 400 naming the unscripted request)."""
        self.responder: Callable[[Recorded], Reply] | None = None
        """Answers every API request when set (``testkit/cache_sim.py``: a cache-accounting mode)."""
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None

    # --- control ---------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """For Anthropic's SDK (it appends ``/v1/messages``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """For OpenAI's SDK (it appends ``/chat/completions`` or ``/responses``)."""
        return f"{self.base_url}/v1"

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def script(self, fixture: str, **options: Any) -> None:
        self.push(Reply(fixture, **options))

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.default = None
            self.responder = None
            self.openai_prefill = None

    def pending(self) -> int:
        with self._lock:
            return sum(r.times for r in self._queue)

    def _next(self) -> Reply | None:
        with self._lock:
            if not self._queue:
                return self.default
            reply = self._queue[0]
            reply.times -= 1
            if reply.times <= 0:
                self._queue.popleft()
            return reply

    # --- lifecycle -------------------------------------------------------------------

    def start(self) -> LLMServer:
        self._thread = threading.Thread(target=self._run, name="llm-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("llm_server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        connections: set[asyncio.Task[None]] = set()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            connections.add(task)
            try:
                await self._handle(reader, writer)
            finally:
                connections.discard(task)

        server = await asyncio.start_server(on_connect, self.host, self.port)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stopping.wait()
            for task in list(connections):
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)

    # --- HTTP ------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await _read_request(reader)
            if request is None:
                return
            if request.path.startswith("/_control/"):
                await self._control(request, writer)
                return
            with self._lock:
                self.requests.append(request)
            reply = None
            if request.path in API_PATHS:
                reply = self.responder(request) if self.responder else self._next()
            if reply is not None and request.path == "/v1/messages":
                reply = _after_prefill(reply, _anthropic_prefill(request.body), _anthropic_text)
            elif reply is not None and request.path == "/v1/chat/completions":
                prefill = _chat_prefill(request.body, self.openai_prefill)
                reply = _after_prefill(reply, prefill, _chat_text)
            if reply is None:
                what = f"llm_server: nothing scripted for {request.method} {request.path}"
                error = {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": what},
                }
                reply = Reply(body=json.dumps(error), status=400)
            await self._send(reply, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _control(self, request: Recorded, writer: asyncio.StreamWriter) -> None:
        answer: Any = {"ok": True}
        if request.path == "/_control/script":
            items = request.body if isinstance(request.body, list) else [request.body]
            self.push(*(Reply(**item) for item in items))
            answer = {"ok": True, "pending": self.pending()}
        elif request.path == "/_control/requests":
            with self._lock:
                answer = [asdict(r) for r in self.requests]
        elif request.path == "/_control/reset":
            self.reset()
        else:
            answer = {"error": f"unknown control path {request.path}"}
        _write_head(writer, 200, {"content-type": "application/json"}, json.dumps(answer).encode())
        await writer.drain()

    async def _send(
        self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        status = reply.status_code()
        if not reply.is_sse():
            headers = {"content-type": "application/json", **reply.all_headers()}
            _write_head(writer, status, headers, reply.content().encode())
            await writer.drain()
            return
        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            "transfer-encoding": "chunked",
            **reply.all_headers(),
        }
        _write_head(writer, status, headers, None)
        events = [e for e in reply.content().split("\n\n") if e.strip()]
        head_at, tokens = asyncio.get_running_loop().time(), 0
        for index, event in enumerate(events):
            if (reply.first_token_s or reply.tokens_per_s) and _is_token(event):
                due = head_at + reply.first_token_s
                due += tokens / reply.tokens_per_s if reply.tokens_per_s else 0.0
                tokens += 1
                await writer.drain()
                await asyncio.sleep(max(0.0, due - asyncio.get_running_loop().time()))
            if index == reply.stall_after_events:
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    # Returns early when the client hangs up (read gives b"").
                    await asyncio.wait_for(reader.read(1), timeout=reply.stall_s)
                if reader.at_eof():
                    return
            if index == reply.drop_after_events:
                await writer.drain()
                return  # the connection closes with the chunked body unfinished
            data = (event + "\n\n").encode()
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()
            if reply.event_delay_s:
                await asyncio.sleep(reply.event_delay_s)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def _anthropic_prefill(body: Any) -> str:
    """The text of an Anthropic request's last assistant message (its prefill), or ""."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not messages or messages[-1].get("role") != "assistant":
        return ""
    content = messages[-1].get("content")
    if isinstance(content, list):
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else ""


def _chat_prefill(body: Any, style: str | None) -> str:
    """The prefill of a Chat Completions request, as a server of ``style`` reads it: the
    last assistant message's text, when the request asks for it to be continued the way
    that server continues one; else "" (the reply starts anew, as OpenAI's own API does)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if style is None or not messages or messages[-1].get("role") != "assistant":
        return ""
    last = messages[-1]
    if style == "vllm" and not (
        body.get("continue_final_message") is True and body.get("add_generation_prompt") is False
    ):
        return ""
    if style == "prefix" and last.get("prefix") is not True:
        return ""
    content = last.get("content")
    return content if isinstance(content, str) else ""


def _anthropic_text(data: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """Where an Anthropic event holds its text: a ``text_delta``'s ``text``."""
    delta = data.get("delta")
    if isinstance(delta, dict) and delta.get("type") == "text_delta":
        return delta, "text"
    return None


def _chat_text(data: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """Where a Chat Completions chunk holds its text: the first choice's ``delta.content``."""
    choices = data.get("choices")
    delta = choices[0].get("delta") if isinstance(choices, list) and choices else None
    if isinstance(delta, dict) and delta.get("content"):
        return delta, "content"
    return None


def _after_prefill(
    reply: Reply,
    prefill: str,
    text_at: Callable[[dict[str, Any]], tuple[dict[str, Any], str] | None],
) -> Reply:
    """A reply to a request that ends with an assistant prefill, as the model goes on from
    it: the text deltas (found by ``text_at``) the prefill already holds are left out (the
    one it ends in is cut). A reply whose text does not start with the prefill is sent whole."""
    if not prefill or not reply.is_sse():
        return reply
    left = prefill
    events = []
    for event in reply.content().split("\n\n"):
        lines = event.split("\n")
        at = next((i for i, line in enumerate(lines) if line.startswith("data:")), None)
        data: Any = None
        if left and at is not None:
            with contextlib.suppress(ValueError):
                data = json.loads(lines[at][5:])
        found = text_at(data) if isinstance(data, dict) else None
        if found is not None:
            holder, key = found
            text = holder[key]
            if not (left.startswith(text) or text.startswith(left)):
                return reply  # not a prefix of the scripted text
            cut = min(len(left), len(text))
            left, holder[key] = left[cut:], text[cut:]
            if not holder[key]:
                continue
            lines[at] = "data: " + json.dumps(data, separators=(",", ":"))
            event = "\n".join(lines)
        events.append(event)
    return reply if left else replace(reply, body="\n\n".join(events), fixture=None, times=1)


def _is_token(event: str) -> bool:
    """An SSE event that carries a token: Anthropic's ``content_block_delta``, OpenAI's
    chat chunks with content or tool-call deltas, a Responses ``….delta`` event."""
    return any(
        marker in event
        for marker in ('"content_block_delta"', '"delta":{"content"', '"tool_calls"', '.delta"')
    )


def _write_head(
    writer: asyncio.StreamWriter, status: int, headers: dict[str, str], body: bytes | None
) -> None:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Overloaded" if status == 529 else "Error"
    lines = [f"HTTP/1.1 {status} {reason}", "connection: close"]
    if body is not None:
        lines.append(f"content-length: {len(body)}")
    lines += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))


async def _read_request(reader: asyncio.StreamReader) -> Recorded | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raw = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            raw += chunk[:-2]
    else:
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
    body: Any = raw.decode("utf-8", "replace")
    with contextlib.suppress(ValueError):
        body = json.loads(body) if body else None
    return Recorded(
        method=method,
        path=target.split("?", 1)[0],
        headers=headers,
        body=body,
        raw=raw.decode("utf-8", "replace"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = LLMServer(args.host, args.port).start()
    print(f"llm_server listening on {server.base_url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    server.stop()


if __name__ == "__main__":
    main()
