"""A fault-injecting TCP proxy for the tests: put it between a worker and the Temporal server,
PostgreSQL or Redis, and break the link the ways networks break.

It runs on its own thread and event loop, so a test that blocks its own loop (or a busy
machine) does not stall the traffic it forwards. Every fault is a method that takes effect at
once and lasts until it is undone (``heal``):

* :meth:`reset`: every open connection is aborted with a TCP RST, mid-stream; new ones pass.
* :meth:`refuse`: open connections are reset and new ones are closed at once.
* :meth:`blackhole`: nothing passes either way and nothing is closed: bytes wait (as TCP
  would retransmit them) and new connections hang; :meth:`heal` lets it all through.
* :meth:`partition`: a one-way blackhole, ``"to_target"`` (requests vanish) or
  ``"from_target"`` (answers vanish).
* :meth:`slow`: each chunk waits ``latency_s`` and the link carries at most
  ``bytes_per_s``.

``stats`` counts the connections and bytes forwarded each way, so a test can check that the
traffic really went through the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CHUNK = 64 * 1024
DIRECTIONS = ("to_target", "from_target")


@dataclass
class Stats:
    connections: int = 0
    resets: int = 0
    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))


class FaultProxy:
    """A TCP proxy from ``127.0.0.1:port`` to ``target``, with faults switched on and off."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.stats = Stats()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._open = {d: asyncio.Event() for d in DIRECTIONS}  # set: the direction passes
        self._refusing = False
        self._latency_s = 0.0
        self._bytes_per_s = 0.0

    # --- life -----------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._heal)
        self._server = self._run(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # --- faults ---------------------------------------------------------------------------

    def reset(self) -> int:
        """Abort every open connection with a RST; returns how many there were."""
        return int(self._run(self._reset_all()))

    def refuse(self) -> None:
        self._refusing = True
        self.reset()

    def blackhole(self) -> None:
        def close_both() -> None:
            for direction in DIRECTIONS:
                self._open[direction].clear()

        self._call(close_both)

    def partition(self, direction: str) -> None:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
        self._call(self._open[direction].clear)

    def slow(self, latency_s: float = 0.0, bytes_per_s: float = 0.0) -> None:
        self._latency_s, self._bytes_per_s = latency_s, bytes_per_s

    def heal(self) -> None:
        """Undo every fault: what waited passes, new connections connect."""
        self._refusing = False
        self.slow()
        self._call(self._heal)

    # --- the proxy ------------------------------------------------------------------------

    def _heal(self) -> None:
        for event in self._open.values():
            event.set()

    def _call(self, fn: Callable[[], Any]) -> None:
        self._loop.call_soon_threadsafe(fn)

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            _abort(writer)
            return
        self._writers.add(writer)
        try:
            await self._open["to_target"].wait()  # a blackholed link: the connect hangs
            try:
                up_r, up_w = await asyncio.open_connection(*self.target)
            except OSError:
                _abort(writer)
                return
            self.stats.connections += 1
            self._writers.add(up_w)
            await asyncio.gather(
                self._pipe(reader, up_w, "to_target"), self._pipe(up_r, writer, "from_target")
            )
        except asyncio.CancelledError:
            pass  # the proxy closing: asyncio's stream callback would log a cancelled handler
        finally:
            self._writers.discard(writer)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, way: str) -> None:
        try:
            while data := await src.read(CHUNK):
                await self._open[way].wait()
                if self._latency_s:
                    await asyncio.sleep(self._latency_s)
                if self._bytes_per_s:
                    await asyncio.sleep(len(data) / self._bytes_per_s)
                await self._open[way].wait()
                dst.write(data)
                await dst.drain()
                self.stats.bytes[way] += len(data)
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(dst)
            with contextlib.suppress(Exception):
                dst.close()

    async def _reset_all(self) -> int:
        writers = list(self._writers)
        for writer in writers:
            _abort(writer)
        self._writers.clear()
        self.stats.resets += len(writers)
        return len(writers)

    async def _close(self) -> None:
        self._refusing = True
        await self._reset_all()
        self._heal()
        if self._server is not None:
            self._server.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:  # the connections' handlers: end them before the loop stops
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a RST, not a FIN: what a peer sees when a middlebox drops the connection."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
