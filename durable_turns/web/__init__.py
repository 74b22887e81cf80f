"""The browser front door: the AI SDK "UI message stream" protocol over HTTP/SSE.

``turns serve`` runs :func:`create_app` under uvicorn; the app is a plain ASGI app, so it
mounts inside another service too. It holds no turn state of its own: every request is
answered from Temporal (the conversation's state, its updates and signals), the live chunk
stream and the transcript store, so any number of replicas serve any chat.

    protocol   the turn's chunk stream as UI message chunks; stored messages as UIMessages
    requests   what a browser may send (bounded, typed errors)
    auth       who is asking, and which conversation a chat id names for them
    app        the routes
"""

from durable_turns.web.app import create_app

__all__ = ["create_app"]
