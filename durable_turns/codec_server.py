"""A codec server: lets the Temporal UI and CLI show encrypted payloads decrypted.

It speaks Temporal's remote-codec protocol: ``POST /decode`` and ``POST /encode`` (also
``/<namespace>/decode`` …) take and return ``{"payloads": [...]}``, the proto-JSON form of
``temporal.api.common.v1.Payloads`` (metadata values and data base64-encoded), and answer
CORS preflights for the UI's origin. ``GET /health`` answers 200 without authentication.

Run it beside the workers, with the same keys::

    export TURNS_ENCRYPTION_KEYS="k2:…,k1:…"        # as the workers (see durable_turns.codec)
    export TURNS_CODEC_SERVER_TOKEN="$(openssl rand -hex 32)"
    python -m durable_turns.codec_server --port 8081

Every encode/decode request must carry ``Authorization: Bearer $TURNS_CODEC_SERVER_TOKEN``
(anything else gets 401); the server refuses to start without a token unless given
``--no-auth``, which is only allowed on a loopback address. The CLI sends the token::

    temporal workflow show -w <id> --codec-endpoint http://127.0.0.1:8081 \\
        --codec-auth "Bearer $TURNS_CODEC_SERVER_TOKEN"

The Temporal UI sends its *user's* access token (``TEMPORAL_CODEC_PASS_ACCESS_TOKEN=true``)
only when the UI itself has sign-in configured; a UI without sign-in sends none. For a local
UI without sign-in, run the server with ``--no-auth`` on 127.0.0.1 — it is reachable from
this machine only — and point the UI at it::

    python -m durable_turns.codec_server --port 8081 --no-auth
    temporal server start-dev --ui-codec-endpoint http://127.0.0.1:8081

(or, in docker-compose, ``TEMPORAL_CODEC_ENDPOINT=http://localhost:8081`` on the UI
service: the *browser* calls the codec server, so the address is the one the browser sees).

CORS: allowed origins come from ``--cors-origin`` (repeatable) or the comma-separated
``TURNS_CODEC_SERVER_CORS_ORIGINS``; the default is the dev server's UI and the compose UI
(``http://localhost:8233``, ``http://127.0.0.1:8233``, ``http://localhost:8080``,
``http://127.0.0.1:8080``). ``*`` allows any origin.

Only the standard library (``http.server``) and temporalio's protobuf types are used.
Neither keys nor tokens are ever logged.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import PayloadCodec

from durable_turns.codec import SERVER_TOKEN_ENV, CodecError, codec_from_env

log = logging.getLogger("durable_turns.codec_server")

ENV_TOKEN = SERVER_TOKEN_ENV
ENV_CORS_ORIGINS = "TURNS_CODEC_SERVER_CORS_ORIGINS"
DEFAULT_CORS_ORIGINS = (
    "http://localhost:8233",
    "http://127.0.0.1:8233",
    "http://localhost:8080",
    "http://127.0.0.1:8080",
)
DEFAULT_PORT = 8081
MAX_BODY_BYTES = 64 * 1024 * 1024
ALLOWED_HEADERS = "Authorization, Content-Type, X-Namespace"


class CodecHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server holding the codec, the token and the CORS origins."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        codec: PayloadCodec,
        token: str | None,
        cors_origins: Sequence[str] = DEFAULT_CORS_ORIGINS,
    ) -> None:
        self.codec = codec
        self.token = token
        self.cors_origins = frozenset(cors_origins)
        self._thread: threading.Thread | None = None
        super().__init__(address, CodecRequestHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}"

    def start(self) -> CodecHTTPServer:
        """Serve on a background thread (tests, embedding); ``close()`` stops it."""
        self._thread = threading.Thread(target=self.serve_forever, name="codec-server", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()

    def origin_allowed(self, origin: str | None) -> bool:
        return bool(origin) and ("*" in self.cors_origins or origin in self.cors_origins)

    def authorized(self, header: str | None) -> bool:
        if self.token is None:
            return True
        if not header:
            return False
        scheme, _, credentials = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(credentials.strip().encode(), self.token.encode())

    def transform(self, action: str, payloads: list[Payload]) -> list[Payload]:
        """Run the (async) codec from this request's thread."""
        if action == "encode":
            return asyncio.run(self.codec.encode(payloads))
        return asyncio.run(self.codec.decode(payloads))


class CodecRequestHandler(BaseHTTPRequestHandler):
    server: CodecHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "durable-turns-codec"
    sys_version = ""
    _ACTIONS: ClassVar[tuple[str, ...]] = ("encode", "decode")

    # --- routing --------------------------------------------------------------------------

    def do_OPTIONS(self) -> None:
        origin = self.headers.get("Origin")
        if not self.server.origin_allowed(origin):
            self._send(HTTPStatus.FORBIDDEN, {"error": "origin not allowed"})
            return
        requested = self.headers.get("Access-Control-Request-Headers")
        self._send(
            HTTPStatus.NO_CONTENT,
            None,
            {
                "Access-Control-Allow-Methods": "POST, GET, OPTIONS",
                "Access-Control-Allow-Headers": requested or ALLOWED_HEADERS,
                "Access-Control-Max-Age": "600",
            },
        )

    def do_GET(self) -> None:
        if self._path() in ("/health", "/healthz"):
            self._send(HTTPStatus.OK, {"status": "ok"})
        else:
            self._send(HTTPStatus.NOT_FOUND, {"error": "not found"})

    def do_POST(self) -> None:
        action = self._path().rstrip("/").rsplit("/", 1)[-1]
        if action not in self._ACTIONS:
            self._discard_body()
            self._send(HTTPStatus.NOT_FOUND, {"error": "POST /encode or /decode"})
            return
        if not self.server.authorized(self.headers.get("Authorization")):
            self._discard_body()
            self._send(
                HTTPStatus.UNAUTHORIZED,
                {"error": "missing or wrong bearer token"},
                {"WWW-Authenticate": 'Bearer realm="codec"'},
            )
            return
        body = self._read_body()
        if body is None:
            return
        try:
            request = json_format.Parse(body, Payloads(), ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError, ValueError) as e:
            self._send(HTTPStatus.BAD_REQUEST, {"error": f"body is not proto-JSON Payloads: {e}"})
            return
        try:
            result = self.server.transform(action, list(request.payloads))
        except CodecError as e:
            self._send(HTTPStatus.BAD_REQUEST, {"error": str(e)})
            return
        except Exception:
            log.exception("%s failed", action)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{action} failed"})
            return
        self._send(HTTPStatus.OK, json_format.MessageToDict(Payloads(payloads=result)))

    # --- plumbing -------------------------------------------------------------------------

    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    def _content_length(self) -> int | None:
        try:
            return int(self.headers.get("Content-Length", "0"))
        except ValueError:
            return None

    def _discard_body(self) -> None:
        length = self._content_length()
        if length is None or not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True  # cannot skip it safely: drop the connection
        elif length:
            self.rfile.read(length)

    def _read_body(self) -> bytes | None:
        length = self._content_length()
        if length is None or length < 0:
            self.close_connection = True
            self._send(HTTPStatus.BAD_REQUEST, {"error": "bad Content-Length"})
            return None
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
            return None
        return self.rfile.read(length)

    def _send(
        self, status: HTTPStatus, body: Any | None, headers: dict[str, str] | None = None
    ) -> None:
        data = b"" if body is None else json.dumps(body).encode("utf-8")
        self.send_response(status)
        origin = self.headers.get("Origin")
        if self.server.origin_allowed(origin):
            self.send_header("Access-Control-Allow-Origin", origin or "")
            self.send_header("Access-Control-Allow-Credentials", "true")
        self.send_header("Vary", "Origin")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        # The request line and status only: headers (the token) are never logged.
        log.info("%s %s", self.address_string(), format % args)


def make_server(
    codec: PayloadCodec,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    cors_origins: Sequence[str] = DEFAULT_CORS_ORIGINS,
) -> CodecHTTPServer:
    """A bound (not yet serving) codec server; ``port=0`` picks a free port."""
    return CodecHTTPServer((host, port), codec, token or None, cors_origins)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m durable_turns.codec_server",
        description="Serve /encode and /decode for the Temporal UI and CLI (encrypted payloads).",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    p.add_argument(
        "--cors-origin",
        action="append",
        help=f"an allowed browser origin (repeatable; env {ENV_CORS_ORIGINS}; '*' for any)",
    )
    p.add_argument(
        "--no-auth",
        action="store_true",
        help=f"serve without {ENV_TOKEN} (loopback addresses only: for a local UI without sign-in)",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    from durable_turns.environment_secrets import install_log_redaction

    install_log_redaction()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parser().parse_args(argv)
    try:
        codec = codec_from_env()
    except CodecError as e:
        sys.exit(f"codec server: {e}")
    if codec is None:
        sys.exit("codec server: set TURNS_ENCRYPTION_KEYS (the same keys as the workers)")
    token = os.environ.get(ENV_TOKEN) or None
    if args.no_auth:
        if not _is_loopback(args.host):
            sys.exit("codec server: --no-auth is only allowed on a loopback --host")
        token = None
    elif token is None:
        sys.exit(f"codec server: set {ENV_TOKEN}, or pass --no-auth to serve on loopback only")
    origins = args.cors_origin or [
        o.strip() for o in os.environ.get(ENV_CORS_ORIGINS, "").split(",") if o.strip()
    ]
    server = make_server(codec, args.host, args.port, token, origins or DEFAULT_CORS_ORIGINS)

    def stop(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    auth = "bearer token required" if token else "NO authentication (loopback only)"
    print(f"codec server on {server.url} ({auth}); CORS origins: {sorted(server.cors_origins)}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print("codec server stopped", flush=True)


if __name__ == "__main__":
    main()
