"""A page on another site cannot drive a front door that runs without authentication.

Without authentication (a loopback door, ``docs/web.md#security``) nothing but the request
itself says who sent it, so the door takes a state-changing request only when its body is
declared ``application/json`` (the media type parsed exactly: a browser sends nothing else
cross-site without a CORS preflight, and none is granted) and when neither ``Origin`` nor
``Sec-Fetch-Site`` says another site sent it. Three levels: the ASGI app in process (each
refusal comes before the door connects to anything), a real ``turns serve`` over a real
worker (nothing starts, nothing stops), and a page served from another origin in real
headless Chromium, whose ``fetch(…, {mode: "no-cors"})`` neither starts nor stops a turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from temporalio.service import RPCError

from durable_turns.config import Settings
from durable_turns.web import create_app
from durable_turns.web.admission import cross_site_problem, guard_request, media_type
from durable_turns.web.requests import BadRequest
from tests.support.harness import Harness
from tests.support.probes import wait_until
from tests.support.web import (
    browser,
    chat_body,
    free_port,
    needs_chromium,
    post_chat,
    user_message,
)

BYPASSES = [
    "text/plain; x=application/json",
    "text/plain;application/json",
    "application/x-www-form-urlencoded; charset=application/json",
    "multipart/form-data; boundary=application/json",
    "text/plain",
    "application/jsonx",
    "application/json-patch+json",
    "xapplication/json",
    "application/json, text/plain",
    "",
]
"""Content types a door must refuse: the issue's four (each holds ``application/json``, and
a browser sends each of them cross-site without a preflight), and their neighbours."""

JSON = {"content-type": "application/json"}
FOREIGN = "http://127.0.0.1:1"
SLOW = [{"text": "word", "repeat": 300, "delay_ms": 50}]
"""A reply of 15 s: it still runs when the attacks are over."""


def open_app(**settings: Any) -> Any:
    """The front door without authentication, in process: a refusal is answered before it
    connects to Temporal (nothing here runs one)."""
    base = Settings.from_env().with_overrides(temporal_address="127.0.0.1:9", **settings)
    if base.http_token:
        base = Settings(**{**base.__dict__, "http_token": None})
    return create_app(base)


def asgi(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000", timeout=10
    )


BODY = json.dumps(chat_body("c", [user_message("hi", "m")]))


# --- the rules, in process ----------------------------------------------------------------


def test_the_media_type_is_parsed_exactly() -> None:
    for accepted in [
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
        "  application/json  ;charset=UTF-8",
        "application/json;",
    ]:
        assert media_type(accepted) == "application/json", accepted
    for refused in BYPASSES:
        assert media_type(refused) != "application/json", refused


@pytest.mark.parametrize("content_type", BYPASSES)
async def test_a_post_that_is_not_json_is_415(content_type: str) -> None:
    headers = {"content-type": content_type} if content_type else {}
    async with asgi(open_app()) as http:
        for origin in [{}, {"origin": FOREIGN}]:
            r = await http.post("/api/chat", content=BODY, headers={**headers, **origin})
            assert r.status_code in (403, 415), r.text
            if not origin:
                assert r.status_code == 415, r.text
                assert r.json()["error"]["type"] == "UnsupportedMediaType"
            r = await http.post("/api/chat/c/stop", content="{}", headers={**headers, **origin})
            assert r.status_code in (403, 415), r.text
            if not origin:
                assert r.json()["error"]["type"] == "UnsupportedMediaType", r.text


async def test_every_state_changing_route_needs_json() -> None:
    """Each route of the app with a method other than GET / HEAD / OPTIONS, found from the
    app itself: a route added later is held to the rule without a line here."""
    app = open_app()
    routes = [
        (method, route.path.replace("{chat_id:path}", "c"))
        for route in app.routes
        for method in getattr(route, "methods", None) or ()
        if method not in ("GET", "HEAD", "OPTIONS")
    ]
    assert ("POST", "/api/chat") in routes and ("POST", "/api/chat/c/stop") in routes
    async with asgi(app) as http:
        for method, path in routes:
            for headers in [{}, {"content-type": "text/plain; x=application/json"}]:
                r = await http.request(method, path, content="{}", headers=headers)
                assert r.status_code == 415, (method, path, r.text)
                assert r.json()["error"]["type"] == "UnsupportedMediaType"


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": FOREIGN},
        {"origin": "http://localhost:8000"},  # another host name than the request's own
        {"origin": "https://127.0.0.1:8000"},  # another scheme
        {"origin": "null"},  # a sandboxed frame, a file: page
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},  # another port of this host is another site's page
        {"sec-fetch-site": "same-origin", "origin": "http://evil.example"},
    ],
)
async def test_a_cross_site_request_is_403(headers: dict[str, str]) -> None:
    async with asgi(open_app()) as http:
        for method, path in [
            ("POST", "/api/chat"),
            ("POST", "/api/chat/c/stop"),
            ("GET", "/api/chat/c/stream"),
            ("GET", "/api/chat/c/messages"),
        ]:
            r = await http.request(method, path, content=BODY, headers={**JSON, **headers})
            assert r.status_code == 403, (method, path, r.text)
            assert r.json()["error"]["type"] == "Forbidden"
        page = await http.get("/", headers=headers)
        assert page.status_code == 200, "a link from elsewhere still opens the page"


def test_which_origins_are_the_doors_own() -> None:
    own = {"host": "127.0.0.1:8000"}
    for headers in [
        own,
        {**own, "origin": "http://127.0.0.1:8000"},
        {**own, "origin": "HTTP://127.0.0.1:8000"},
        {**own, "sec-fetch-site": "same-origin", "origin": "http://127.0.0.1:8000"},
        {**own, "sec-fetch-site": "none"},  # typed into the address bar, a bookmark
        {"host": "localhost", "origin": "http://localhost:80"},
        {"host": "localhost:80", "origin": "http://localhost"},
    ]:
        assert cross_site_problem(headers, "http", frozenset()) is None, headers
    assert (
        cross_site_problem(
            {"host": "[::1]:8000", "origin": "http://[::1]:8000"}, "http", frozenset()
        )
        is None
    )
    tls = {**own, "origin": "https://127.0.0.1:8000"}
    assert cross_site_problem(tls, "https", frozenset()) is None  # behind a TLS proxy
    assert cross_site_problem(tls, "http", frozenset()) is not None
    # an allowed origin (TURNS_HTTP_ORIGINS: a dev server's proxy that rewrites Host)
    allowed = frozenset({"http://localhost:5173"})
    for headers in [
        {**own, "origin": "http://localhost:5173"},
        {**own, "origin": "http://localhost:5173", "sec-fetch-site": "same-site"},
    ]:
        assert cross_site_problem(headers, "http", allowed) is None
    assert cross_site_problem({**own, "origin": "http://localhost:5174"}, "http", allowed)
    assert Settings.from_env().with_overrides(http_origins=["http://a:1"]).http_origins == [
        "http://a:1"
    ]


def http_request(method: str, headers: dict[str, str]) -> Request:
    return Request(
        {
            "type": "http",
            "method": method,
            "scheme": "http",
            "path": "/api/chat",
            "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        }
    )


async def test_with_authentication_the_credentials_decide_but_json_is_still_required() -> None:
    foreign = {**JSON, "host": "chat.example", "origin": FOREIGN, "sec-fetch-site": "cross-site"}
    guard_request(http_request("POST", foreign), False, frozenset(), False)  # let through
    with pytest.raises(BadRequest) as refused:
        guard_request(
            http_request("POST", {**foreign, "content-type": "text/plain"}),
            False,
            frozenset(),
            False,
        )
    assert refused.value.status == 415
    settings = Settings.from_env().with_overrides(temporal_address="127.0.0.1:9")
    app = create_app(settings, authenticate=lambda headers: None)
    async with asgi(app) as http:
        r = await http.post(
            "/api/chat/c/stop", content="{}", headers={"content-type": "text/plain"}
        )
        assert r.status_code == 415, "before the credentials are even looked at"


# --- a real door over a real worker: nothing starts, nothing stops ------------------------


async def _running(harness: Harness, chat: str) -> bool:
    try:
        state = await harness.turns.state(chat)
    except Exception:
        return False
    return state.running is not None and state.running.turn_number is not None


async def _ended(harness: Harness, chat: str) -> bool:
    state = await harness.turns.state(chat)
    return state.running is None and state.last_result is not None


async def test_a_real_door_starts_and_stops_nothing_for_another_site(
    harness: Harness, door: Any
) -> None:
    harness.start_worker(TURNS_MODEL=harness.script(SLOW), TURNS_HEARTBEAT_TIMEOUT_S="30")
    fd = door()
    victim = harness.conv("xsite-victim")
    task = asyncio.create_task(post_chat(fd.url, chat_body(victim, [user_message("go", "m")])))
    await wait_until(lambda: _running(harness, victim))
    attacks = [
        *[{"content-type": ct, "origin": FOREIGN, "sec-fetch-site": "same-site"} for ct in BYPASSES[:4]],
        *[{"content-type": ct} for ct in BYPASSES[:4]],
        {**JSON, "origin": FOREIGN},
        {**JSON, "sec-fetch-site": "cross-site"},
    ]  # fmt: skip
    async with httpx.AsyncClient(timeout=30) as http:
        for i, headers in enumerate(attacks):
            chat = harness.conv(f"xsite-{i}")
            body = json.dumps(chat_body(chat, [user_message("hi", f"m{i}")]))
            r = await http.post(f"{fd.url}/api/chat", content=body, headers=headers)
            assert r.status_code in (403, 415), (headers, r.text)
            with pytest.raises(RPCError):
                await harness.turns.state(chat)  # no conversation was started
            r = await http.post(f"{fd.url}/api/chat/{victim}/stop", content="{}", headers=headers)
            assert r.status_code in (403, 415), (headers, r.text)
            assert await _running(harness, victim), "the turn still runs"
    _, chunks = await asyncio.wait_for(task, 60)
    await wait_until(lambda: _ended(harness, victim))
    state = await harness.turns.state(victim)
    assert state.last_result is not None and state.last_result.status == "completed"
    assert "abort" not in [c["type"] for c in chunks if isinstance(c, dict)]


# --- a page on another origin, in real Chromium -------------------------------------------


ATTACK_PAGE = """<!doctype html><meta charset="utf-8"><title>elsewhere</title>
<body><script>
(async () => {
  const door = %(door)s, chats = %(chats)s, victim = %(victim)s, types = %(types)s;
  const out = [];
  for (let i = 0; i < types.length; i++) {
    const body = JSON.stringify({id: chats[i], trigger: "submit-message",
      messages: [{id: "m" + i, role: "user", parts: [{type: "text", text: "hi"}]}]});
    try {
      const r = await fetch(door + "/api/chat", {mode: "no-cors", method: "POST", body,
        headers: {"content-type": types[i]}});
      out.push("chat " + r.type);
    } catch (e) { out.push("chat error " + e); }
    try {
      const r = await fetch(door + "/api/chat/" + victim + "/stop", {mode: "no-cors",
        method: "POST", body: "{}", headers: {"content-type": types[i]}});
      out.push("stop " + r.type);
    } catch (e) { out.push("stop error " + e); }
  }
  const done = document.createElement("pre");
  done.dataset.testid = "done";
  done.textContent = out.join("\\n");
  document.body.append(done);
})();
</script></body>"""


@contextlib.contextmanager
def serve_page(html: str) -> Iterator[str]:
    """One page on its own port: another origin than the door's."""
    data = html.encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.shutdown()
        server.server_close()


@needs_chromium
async def test_a_page_on_another_origin_cannot_start_or_stop_a_turn(
    harness: Harness, door: Any
) -> None:
    harness.start_worker(TURNS_MODEL=harness.script(SLOW), TURNS_HEARTBEAT_TIMEOUT_S="30")
    fd = door()
    victim = harness.conv("chromium-victim")
    task = asyncio.create_task(post_chat(fd.url, chat_body(victim, [user_message("go", "m")])))
    await wait_until(lambda: _running(harness, victim))
    types = BYPASSES[:4]
    chats = [harness.conv(f"chromium-xsite-{i}") for i in range(len(types))]
    page = ATTACK_PAGE % {
        "door": json.dumps(fd.url),
        "chats": json.dumps(chats),
        "victim": json.dumps(victim),
        "types": json.dumps(types),
    }
    with serve_page(page) as url:
        assert url.rsplit(":", 1)[0] + ":" in fd.url and url != fd.url + "/"  # another port
        result = await browser(
            {"url": url, "timeoutMs": 30000, "steps": [{"do": "waitTestid", "testid": "done"}]}
        )
    assert result["ok"], result
    # Chromium sent each request (no-cors: the page sees an opaque answer) and the door
    # refused each one: its status, as Chromium's network layer saw it
    sent = [r for r in result["responses"] if r["method"] == "POST" and r["status"]]
    assert len(sent) == 2 * len(types), result["responses"]
    assert {r["status"] for r in sent} <= {403, 415}, sent
    for chat in chats:
        with pytest.raises(RPCError):
            await harness.turns.state(chat)  # no turn started
    assert await _running(harness, victim), "the victim's turn was not stopped"
    _, chunks = await asyncio.wait_for(task, 60)
    await wait_until(lambda: _ended(harness, victim))
    state = await harness.turns.state(victim)
    assert state.last_result is not None and state.last_result.status == "completed"
    assert "abort" not in [c["type"] for c in chunks if isinstance(c, dict)]
