"""The front door's routes: the AI SDK chat endpoints over one Temporal client.

    POST /api/chat                 a new user message (a turn), a client tool's output or an
                                   approval (the same reply goes on), or a regenerate
    GET  /api/chat/{id}/stream     the running reply from its start, then live (204: none)
    GET  /api/chat/{id}/messages   the conversation as UIMessage[]
    POST /api/chat/{id}/stop       cancelChat for the running turn
    GET  /                         the chat page

Nothing here holds a turn's state: a reply is read from the turn's live chunk stream by
offset, a conversation from the transcript store, what runs from the conversation's
``state``. Any replica answers any request, and a reply's stream can be dropped, resumed
and read twice without a duplicated or missing character.

This module only assembles them: the door's connection (lifespan, or the first request of
a mounted app), the admission check every route passes, the error handlers and the routes.
What each route does lives below it (``admission``, ``chat``, ``replies``, ``sse``,
``door``; listed in the package's docstring), and none of those imports this one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.responses import Response

from durable_turns.client import TurnsClient
from durable_turns.config import Settings
from durable_turns.errors import NoWorker
from durable_turns.store import open_store
from durable_turns.streams.hub import StreamHub
from durable_turns.web import protocol
from durable_turns.web.admission import SAFE_METHODS, allowed_origins, guard_request, read_body
from durable_turns.web.auth import Authenticate, Unauthorized, bearer_tokens
from durable_turns.web.chat import chat
from durable_turns.web.door import FrontDoor
from durable_turns.web.replies import frames, running_reply, wants_v7
from durable_turns.web.requests import MAX_BODY_BYTES, BadRequest, parse_chat_request
from durable_turns.web.sse import EventStream


def create_app(
    settings: Settings | None = None,
    *,
    authenticate: Authenticate | None = None,
    client: TurnsClient | None = None,
) -> Any:
    """The front door as an ASGI app (FastAPI). ``authenticate`` (headers → principal)
    overrides ``TURNS_HTTP_TOKEN``; with neither, every request is let in and chat ids are
    conversation ids. ``client`` reuses a connected ``TurnsClient``."""
    settings = settings or Settings.from_env()
    if authenticate is None and settings.http_token:
        authenticate = bearer_tokens(settings.http_token)
    door: dict[str, FrontDoor] = {}
    opening = asyncio.Lock()

    async def opened() -> FrontDoor:
        """The door, connected on first use: by the app's lifespan, or by its first request
        where nothing runs the lifespan (Starlette runs none for a mounted app)."""
        if "it" not in door:
            async with opening:
                if "it" not in door:
                    turns = client or await TurnsClient.connect(settings)
                    streams = await turns.stream_backend()
                    store = open_store(settings.resolved_store_url)
                    await store.open()
                    door["it"] = FrontDoor(
                        authenticate=authenticate,
                        client=turns,
                        streams=streams,
                        hub=StreamHub(streams, by_conversation=True),
                        store=store,
                        max_streams=settings.http_max_streams,
                        max_streams_per_principal=settings.http_max_streams_per_principal,
                        models=frozenset(settings.http_models),
                    )
        return door["it"]

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await opened()
        try:
            yield
        finally:
            it = door.pop("it", None)
            if it is not None:
                await it.store.close()
                if client is None:
                    await it.client.aclose()

    allowed = allowed_origins(settings.http_origins)
    public: set[Any] = set()  # endpoints a safe request may reach from anywhere

    async def guard(request: Request) -> None:
        """Every route's first step (:func:`guard_request`), so no route can miss it."""
        safe = request.method in SAFE_METHODS
        guard_request(
            request, authenticate is None, allowed, safe and request.scope.get("endpoint") in public
        )

    app = FastAPI(
        title="durable-turns",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        dependencies=[Depends(guard)],
    )

    @app.exception_handler(BadRequest)
    async def _bad(request: Request, exc: BadRequest) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(Unauthorized)
    async def _unauthorized(request: Request, exc: Unauthorized) -> Response:
        return JSONResponse(
            {"error": {"type": "Unauthorized", "message": str(exc)}},
            status_code=401,
            headers={"www-authenticate": "Bearer"},
        )

    @app.post("/api/chat")
    async def post_chat(request: Request) -> Any:
        it = await opened()
        principal = await it.principal(request.headers)
        raw = await read_body(request, MAX_BODY_BYTES)
        asked = parse_chat_request(raw)
        conv = it.conversation(principal, asked.id)
        it.reserve(principal)
        try:
            reply = await chat(it, conv, asked)
        except BaseException:
            it.release(principal)
            raise
        out = frames(it, reply, reset_step=wants_v7(request.headers, settings.http_protocol))
        return EventStream(it, out, principal)

    @app.get("/api/chat/{chat_id:path}/stream")
    async def get_stream(chat_id: str, request: Request) -> Any:
        it = await opened()
        principal = await it.principal(request.headers)
        conv = it.conversation(principal, chat_id)
        reply = await running_reply(it, conv)
        if reply is None:
            return Response(status_code=204)
        it.reserve(principal)
        out = frames(it, reply, reset_step=wants_v7(request.headers, settings.http_protocol))
        return EventStream(it, out, principal)

    @app.get("/api/chat/{chat_id:path}/messages")
    async def get_messages(chat_id: str, request: Request) -> Any:
        it = await opened()
        conv = it.conversation(await it.principal(request.headers), chat_id)
        messages = protocol.ui_messages(await it.store.messages(conv))
        return Response(protocol.dumps(messages), media_type="application/json")

    @app.post("/api/chat/{chat_id:path}/stop")
    async def stop(chat_id: str, request: Request) -> Any:
        it = await opened()
        conv = it.conversation(await it.principal(request.headers), chat_id)
        try:
            state = await it.state(conv, worker=True)
        except NoWorker as e:  # the signal waits for a worker, as what it cancels does
            await it.call(it.client.cancel(conv, None))
            return JSONResponse({"stopped": True, "request_id": None, "waiting": str(e)})
        running = state.running if state else None
        if running is None:
            return JSONResponse({"stopped": False, "reason": "no turn is running"})
        await it.call(it.client.cancel(conv, running.request_id))
        return JSONResponse(
            {"stopped": True, "request_id": running.request_id, "turn_number": running.turn_number}
        )

    @app.get("/")
    async def page() -> Any:
        html = resources.files("durable_turns.web").joinpath("static/index.html").read_text()
        return HTMLResponse(html, headers={"cache-control": "no-cache"})

    @app.get("/api/health")
    async def health() -> Any:
        """200 when Temporal answers and workers poll the task queue, else 503; either way
        the JSON says which (``docs/web.md``)."""
        it = await opened()
        ok, body = await it.workers.health()
        body = {
            "ok": ok,
            **body,
            "open_streams": it.open_streams,
            "streams_followed": it.hub.followed,
            "closing": it.closing.is_set(),
        }
        return JSONResponse(body, status_code=200 if ok and not it.closing.is_set() else 503)

    async def drain() -> None:
        """Shutdown's first step: every open response ends now with ``data-resume``."""
        if "it" in door:
            door["it"].closing.set()

    app.state.drain = drain

    public.update({page, health})

    return app
