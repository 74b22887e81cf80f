"""The browser front door: the AI SDK "UI message stream" protocol over HTTP/SSE.

``turns serve`` runs :func:`create_app` under uvicorn; the app is a plain ASGI app, so it
mounts inside another service too. It holds no turn state of its own: every request is
answered from Temporal (the conversation's state, its updates and signals), the live chunk
stream and the transcript store, so any number of replicas serve any chat.

    protocol   the turn's chunk stream as UI message chunks; stored messages as UIMessages
    requests   what a browser may send (bounded, typed errors)
    auth       who is asking, and which conversation a chat id names for them
    watch      whether workers run a chat (``data-waiting``, the health check)
    admission  what every request passes before its route (loopback, cross-site, JSON, size)
    door       what the routes share (``FrontDoor``), a Temporal refusal as an HTTP answer
    replies    reading a reply: which one a chat produces, its turns' streams as frames
    chat       the chat POST flow: what a new message, a tool's answer or a regenerate does
    sse        the SSE response: backpressure, keep-alives, shutdown
    app        the routes (``create_app``), on top of all of them
"""

from durable_turns.web.app import create_app

__all__ = ["create_app"]
