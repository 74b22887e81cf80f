"""The SSE response: a reply's frames sent with backpressure, keep-alives and a bounded
buffer.

Frames come from a bounded queue filled by the reader of the turn's stream (``replies``),
which waits when the client reads slowly; an idle connection gets a keep-alive comment; a
client that takes nothing for ``WRITE_TIMEOUT_S`` is disconnected; a door that shuts down
ends the response with ``data-resume``. A closed connection is not a Stop: the turn goes
on, and the reply can be resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import Response

from durable_turns.web import protocol, watch
from durable_turns.web.door import FrontDoor
from durable_turns.web.requests import BadRequest

log = logging.getLogger("durable_turns.web")

KEEPALIVE_S = 15.0
"""An SSE comment after this long without a chunk (proxies close idle connections)."""

WRITE_TIMEOUT_S = 30.0
"""A client that takes no data for this long is disconnected (its stream can resume)."""

QUEUE_FRAMES = 64
"""Frames buffered per response: past it the reader waits for the client (backpressure)."""


class EventStream(Response):
    """An SSE response with backpressure: frames come from a bounded queue filled by the
    reader of the turn's stream, which waits when the client reads slowly; a client that
    takes nothing for ``WRITE_TIMEOUT_S`` is disconnected; a closed connection stops the
    reader (it is not a Stop: the turn goes on, and the stream can be resumed)."""

    def __init__(
        self, door: FrontDoor, frames: AsyncIterator[bytes], principal: str | None = None
    ) -> None:
        super().__init__(status_code=200, headers=protocol.HEADERS)
        self.door = door
        self.frames = frames
        self.principal = principal

    async def __call__(
        self,
        scope: Any,
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_FRAMES)

        async def produce() -> None:
            try:
                async for data in self.frames:
                    await queue.put(data)
            except BadRequest as e:
                await queue.put(protocol.frame({"type": "error", "errorText": e.message}))
                await queue.put(protocol.DONE)
            except Exception as e:  # never a silent hang: the client sees it
                log.exception("a reply's stream failed")
                await queue.put(protocol.frame({"type": "error", "errorText": type(e).__name__}))
                await queue.put(protocol.DONE)
            # (cancelled: nobody reads the queue any more, so nothing more is put in it)
            await queue.put(None)

        async def disconnected() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return

        producer = asyncio.create_task(produce())
        watcher = asyncio.create_task(disconnected())
        closing = asyncio.create_task(self.door.closing.wait())
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(k.encode(), v.encode()) for k, v in protocol.HEADERS.items()],
                }
            )
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait(
                    {getter, watcher, closing},
                    timeout=KEEPALIVE_S,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if watcher in done:
                    getter.cancel()
                    return
                if closing in done and getter not in done:
                    # the door shuts down: the client resumes the reply elsewhere (no [DONE])
                    getter.cancel()
                    await asyncio.wait_for(
                        send(
                            {
                                "type": "http.response.body",
                                "body": protocol.frame(watch.resume_chunk()),
                                "more_body": True,
                            }
                        ),
                        WRITE_TIMEOUT_S,
                    )
                    break
                if getter not in done:
                    getter.cancel()
                    data: bytes | None = protocol.KEEPALIVE
                else:
                    data = getter.result()
                if data is None:
                    break
                # what else is ready goes out in the same write (one send, one syscall)
                batch = [data]
                while not queue.empty() and len(batch) < QUEUE_FRAMES:
                    more = queue.get_nowait()
                    if more is None:
                        queue.put_nowait(None)  # the end, after this write
                        break
                    batch.append(more)
                await asyncio.wait_for(
                    send(
                        {
                            "type": "http.response.body",
                            "body": b"".join(batch) if len(batch) > 1 else data,
                            "more_body": True,
                        }
                    ),
                    WRITE_TIMEOUT_S,
                )
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (TimeoutError, OSError):
            pass  # a slow or gone client: its reply can be resumed
        finally:
            self.door.release(self.principal)
            for task in (producer, watcher, closing):
                task.cancel()
            for task in (producer, watcher, closing):
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(task, 5)
            with contextlib.suppress(BaseException):  # lets the stream's hub entry go
                await asyncio.wait_for(self.frames.aclose(), 5)  # type: ignore[attr-defined]
