"""What every request passes before its route runs: who may drive a door without
authentication (loopback ``Host``, no page of another origin or site), the JSON content
type of a request that may change state, and the body's size bound.

A refusal here is a :class:`BadRequest` (403, 415, 413): it starts and stops nothing, and
needs no connection to Temporal. Who the caller is (credentials) is ``auth``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from durable_turns.web.requests import BadRequest

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


def guard_request(request: Any, open_door: bool, allowed: frozenset[str], public: bool) -> None:
    """What every request passes before its route runs (a refusal starts and stops nothing,
    and needs no connection to Temporal).

    Without authentication (``open_door``: a loopback door) nothing but the request says who
    sent it, so a web page the user visits must not be able to drive the door: the ``Host``
    must be a loopback name (no DNS rebinding, 403), and neither ``Origin`` nor
    ``Sec-Fetch-Site`` may say a page of another origin sent it (403,
    :func:`cross_site_problem`). ``public``: a GET of the page itself, which a link from
    anywhere may open. With authentication the credentials decide.

    And always: a request that may change state (any method but GET, HEAD, OPTIONS) must
    declare its body ``application/json``, parsed exactly (415, :func:`media_type`). A page
    on another site cannot send that without a CORS preflight, which is never granted;
    ``text/plain; x=application/json`` is ``text/plain``."""
    if open_door and not public:
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if name not in LOOPBACK_HOSTS:
            raise BadRequest(
                403,
                "Forbidden",
                f"without authentication this server answers only loopback names, not"
                f" {host[:100]!r} (set TURNS_HTTP_TOKEN to serve other hosts)",
            )
        problem = cross_site_problem(request.headers, request.url.scheme, allowed)
        if problem:
            raise BadRequest(403, "Forbidden", problem)
    if request.method not in SAFE_METHODS:
        given = request.headers.get("content-type", "")
        if media_type(given) != JSON_MEDIA_TYPE:
            raise BadRequest(
                415,
                "UnsupportedMediaType",
                f"send the request as {JSON_MEDIA_TYPE} (content-type: {given[:100]!r})",
            )


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing; every other one is held to :func:`guard_request`'s rules."""

JSON_MEDIA_TYPE = "application/json"

DEFAULT_PORTS = {"http": 80, "https": 443}


def media_type(content_type: str) -> str:
    """The media type of a ``Content-Type`` value: what comes before its first ``;``,
    trimmed and lower-cased (RFC 9110 §8.3.1). ``text/plain; x=application/json`` is
    ``text/plain``: a parameter never makes a body JSON."""
    return content_type.partition(";")[0].strip().lower()


def allowed_origins(origins: list[str]) -> frozenset[str]:
    """``TURNS_HTTP_ORIGINS``, normalised; an entry that is no origin is a ``ValueError``."""
    allowed = set()
    for origin in origins:
        normal = normal_origin(origin)
        if normal is None:
            raise ValueError(
                f"TURNS_HTTP_ORIGINS: {origin!r} is not an origin (scheme://host[:port])"
            )
        allowed.add(normal)
    return frozenset(allowed)


def normal_origin(origin: str) -> str | None:
    """``scheme://host:port`` (lower-cased, the default port written out) of an ``Origin``
    value or an allowed origin; None when it is not one (``null``, a path, no host)."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or parts.username or parts.password:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or DEFAULT_PORTS[scheme]}"


def cross_site_problem(
    headers: Mapping[str, str], scheme: str, allowed: frozenset[str]
) -> str | None:
    """Why a request without authentication looks sent by a page of another site, or None.

    Refused: an ``Origin`` that is not the door's own (``scheme://Host``) nor in ``allowed``
    (normalised by :func:`normal_origin`; ``null`` included), and a ``Sec-Fetch-Site`` other
    than ``same-origin`` or ``none`` (the address bar, a bookmark) unless the ``Origin`` is
    an allowed one: ``same-site`` is refused too, since another port of this host (another
    local server's page) is the same site. A request with neither header (curl, a script,
    the ``ai`` client in Node) is not a page's, and passes."""
    origin = headers.get("origin")
    if origin is not None:
        given = normal_origin(origin)
        if given is not None and given in allowed:
            return None
        own = normal_origin(f"{scheme}://{headers.get('host', '')}")
        if given is None or given != own:
            return (
                f"a request from the page of another origin ({origin[:100]!r}) is refused"
                " without authentication (set TURNS_HTTP_TOKEN, or list the origin in"
                " TURNS_HTTP_ORIGINS)"
            )
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in ("same-origin", "none"):
        return (
            f"a request from a page of another site (Sec-Fetch-Site: {site[:40]!r}) is refused"
            " without authentication (set TURNS_HTTP_TOKEN)"
        )
    return None


async def read_body(request: Any, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BadRequest(
            413, "RequestTooLarge", f"the body is {declared} bytes; the limit is {limit}"
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, "RequestTooLarge", f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
