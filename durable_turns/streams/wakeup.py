"""Cross-process wake-ups for the SQLite chunk stream, so readers need not poll.

SQLite has no notifications, and the embedded default's writers (worker processes) and
readers (clients, ``turns chat``) are different processes on one machine. A reader that
follows a stream registers a Linux abstract-namespace datagram socket and names it with an
empty file in a folder beside the database (``<db>.wake/``); a writer, after each committed
append, sends one byte to every socket named there. Abstract sockets take no filesystem
path (so no 108-byte ``sun_path`` limit) and vanish with their process; a name file left by
a killed reader is removed by the first writer that finds nobody listening.

Elsewhere (no abstract namespace), or when the folder cannot be written, ``listen`` yields
``None`` and readers fall back to polling. A wake-up is a hint, never the data: a reader
always rereads the stream after one, and still rereads now and then without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

log = logging.getLogger(__name__)

SUPPORTED = sys.platform.startswith("linux")
_PREFIX = b"\0durable-turns-wake-"


def _address(name: str) -> bytes:
    return _PREFIX + name.encode()


class WakeChannel:
    """Wake-ups for the readers of one SQLite file."""

    def __init__(self, db_path: str) -> None:
        self.folder = Path(f"{db_path}.wake")
        self._sender: socket.socket | None = None

    def notify(self) -> int:
        """Wake every registered reader (called by a writer after a commit); how many."""
        if not SUPPORTED:
            return 0
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return 0
        if not names:
            return 0
        if self._sender is None:
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.setblocking(False)
        woken = 0
        for name in names:
            try:
                self._sender.sendto(b"w", _address(name))
                woken += 1
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):  # its reader is gone
                    (self.folder / name).unlink()
            except (BlockingIOError, OSError):
                pass  # a full queue: that reader has a wake-up pending already
        return woken

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None

    @contextlib.asynccontextmanager
    async def listen(self) -> AsyncIterator[asyncio.Event | None]:
        """An event set on every wake-up while the block runs (None: not available here).

        Registered before the block starts, so an append after the reader's first read is
        never missed.
        """
        if not SUPPORTED:
            yield None
            return
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        woken = asyncio.Event()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(_address(name))
            sock.setblocking(False)
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / name).touch()
        except OSError as e:
            sock.close()
            log.debug("chunk stream wake-ups unavailable (%r); polling instead", e)
            yield None
            return
        loop = asyncio.get_running_loop()

        def on_readable() -> None:
            with contextlib.suppress(BlockingIOError, OSError):
                while sock.recv(64):
                    pass
            woken.set()

        loop.add_reader(sock.fileno(), on_readable)
        try:
            yield woken
        finally:
            loop.remove_reader(sock.fileno())
            sock.close()
            with contextlib.suppress(OSError):
                (self.folder / name).unlink()
