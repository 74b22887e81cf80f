"""Cross-process wake-ups for the SQLite chunk stream, so readers need not poll.

SQLite has no notifications, and the embedded default's writers (worker processes) and
readers (clients, ``turns chat``, the browser front door) are different processes on one
machine. A process that follows streams registers one Linux abstract-namespace datagram
socket and names it with an empty file in a folder beside the database (``<db>.wake/``); a
writer, after each committed append, sends the stream's id to every socket named there, and
the reading process wakes only the followers of that stream. So an append costs one
datagram per reading process, whatever the number of followers, and a follower rereads only
when its own stream grew. A writer that committed the appends of many streams at once (the
SQLite backend's group commit) names them all in one datagram per reading process. Abstract sockets take no filesystem path (so no 108-byte
``sun_path`` limit) and vanish with their process; a name file left by a killed reader is
removed by the first writer that finds nobody listening. A datagram without a stream id
(``w``, what earlier versions sent), or of a form the reader does not know, wakes every
follower.

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
import time
import uuid
from collections.abc import AsyncIterator, Collection
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
        self._listener: _Listener | None = None
        self._readers: list[tuple[str, bytes]] = []
        """The reading processes' names and addresses, as last listed."""
        self._listed: tuple[int, int] | None = None
        """The folder's mtime when it was last listed, and when that was (ns)."""
        self._folder_fd: int | None = None
        """The folder, open: its mtime is read without looking its path up each time."""

    def notify(self, stream_id: str | None = None) -> int:
        """Wake the readers of ``stream_id`` (every reader without one), in every process
        that follows the file; how many processes were told. Called after a commit."""
        readers = self._reading()
        if not readers:
            return 0
        payload = _STREAM + stream_id.encode("utf-8", "replace") if stream_id else _ALL
        return self._send(readers, [payload])

    def notify_many(self, stream_ids: Collection[str]) -> int:
        """Wake the readers of each of ``stream_ids``: one datagram per reading process
        (per :data:`_DATAGRAM` bytes of ids), however many streams grew. Nothing is built
        when no process reads the file."""
        readers = self._reading()
        if not readers:
            return 0
        payloads: list[bytes] = []
        batch: list[bytes] = []
        size = 0
        for stream_id in stream_ids:
            raw = stream_id.encode("utf-8", "replace")
            if _SEP in raw or not raw:  # a name the batch form cannot carry: on its own
                payloads.append(_STREAM + raw if raw else _ALL)
                continue
            if batch and size + len(raw) + 1 > _DATAGRAM:
                payloads.append(_MANY + _SEP.join(batch))
                batch, size = [], 0
            batch.append(raw)
            size += len(raw) + 1
        if len(batch) == 1:
            payloads.append(_STREAM + batch[0])
        elif batch:
            payloads.append(_MANY + _SEP.join(batch))
        return self._send(readers, payloads) if payloads else 0

    def _send(self, readers: list[tuple[str, bytes]], payloads: list[bytes]) -> int:
        """Each payload to every reading process; how many processes were told."""
        if self._sender is None:
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.setblocking(False)
        woken = 0
        for name, address in readers:
            try:
                for payload in payloads:
                    self._sender.sendto(payload, address)
                woken += 1
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):  # its reader is gone
                    (self.folder / name).unlink()
            except (BlockingIOError, OSError):
                pass  # a full queue: the reader rereads on its fallback poll
        return woken

    def _reading(self) -> list[tuple[str, bytes]]:
        """The reading processes (name, address): the folder's listing (none where wake-ups
        are not supported), listed again only when the folder may have changed since, for a
        writer sends after every commit.

        A name file added or removed changes the folder's mtime, which the file system
        stamps with a coarse clock (a few ms behind). So the last listing is kept while
        the folder's mtime is the one it was listed at, once that mtime is
        :data:`_SETTLED_NS` older than the listing: any later change gets a later stamp.
        A folder changed more recently is listed on every send, as before."""
        if not SUPPORTED:
            return []
        mtime = self._folder_mtime()
        if mtime is None:
            self._listed, self._readers = None, []
            return []
        listed = self._listed
        if listed is not None and listed[0] == mtime and listed[1] - mtime >= _SETTLED_NS:
            return self._readers
        now = time.time_ns()
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            self._listed, self._readers = None, []
            return []
        self._readers = [(name, _address(name)) for name in names]
        self._listed = (mtime, now)
        return self._readers

    def _folder_mtime(self) -> int | None:
        """The folder's mtime (ns), None when there is no folder. Read on the folder kept
        open, reopened when it was removed (a removed folder has no links)."""
        fd = self._folder_fd
        if fd is not None:
            status = os.stat(fd)
            if status.st_nlink > 0:
                return status.st_mtime_ns
            self._folder_fd = None
            os.close(fd)
        try:
            fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        self._folder_fd = fd
        return os.stat(fd).st_mtime_ns

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None
        if self._folder_fd is not None:
            os.close(self._folder_fd)
            self._folder_fd = None

    @contextlib.asynccontextmanager
    async def listen(self, stream_id: str | None = None) -> AsyncIterator[asyncio.Event | None]:
        """An event set whenever ``stream_id`` grows (any stream: None) while the block runs;
        None when wake-ups are not available here. The process's one socket is shared by
        all its followers. Registered before the block starts, so an append after the
        reader's first read is never missed."""
        if not SUPPORTED:
            yield None
            return
        loop = asyncio.get_running_loop()
        listener = self._listener
        shared = listener is not None and listener.loop is loop
        if not shared:
            listener = _Listener.open(self.folder, loop)
            if listener is None:
                yield None
                return
            if self._listener is None:
                self._listener = listener
                shared = True
        assert listener is not None
        woken = asyncio.Event()
        key = stream_id or ""
        listener.waiters.setdefault(key, set()).add(woken)
        try:
            yield woken
        finally:
            waiters = listener.waiters.get(key)
            if waiters is not None:
                waiters.discard(woken)
                if not waiters:
                    del listener.waiters[key]
            if not listener.waiters:
                listener.close()
                if self._listener is listener:
                    self._listener = None


_STREAM = b"s:"
_MANY = b"m:"
"""Several stream ids, separated by :data:`_SEP`."""
_SEP = b"\0"
_ALL = b"w"
_SETTLED_NS = 1_000_000_000
"""How much older than its listing the folder's mtime must be for the listing to be kept
(far above the file system clock's granularity, which is at most a few ms)."""
_DATAGRAM = 4000
"""The most bytes of stream ids in one datagram (a reader reads up to 64 KiB at once;
readers of earlier versions read 4 KiB, and wake everyone on a form they do not know)."""


class _Listener:
    """A process's socket for one file's wake-ups, and who waits on which stream."""

    def __init__(
        self, sock: socket.socket, name_file: Path, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.sock = sock
        self.name_file = name_file
        self.loop = loop
        self.waiters: dict[str, set[asyncio.Event]] = {}
        """By stream id; ``""``: woken by every datagram."""
        loop.add_reader(sock.fileno(), self._on_readable)

    @classmethod
    def open(cls, folder: Path, loop: asyncio.AbstractEventLoop) -> _Listener | None:
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(_address(name))
            sock.setblocking(False)
            with contextlib.suppress(OSError):  # room for bursts of wake-ups
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).touch()
        except OSError as e:
            sock.close()
            log.debug("chunk stream wake-ups unavailable (%r); polling instead", e)
            return None
        return cls(sock, folder / name, loop)

    def _on_readable(self) -> None:
        everyone = False
        streams: set[str] = set()
        while True:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            if data.startswith(_STREAM):
                streams.add(data[len(_STREAM) :].decode("utf-8", "replace"))
            elif data.startswith(_MANY):
                streams.update(
                    raw.decode("utf-8", "replace") for raw in data[len(_MANY) :].split(_SEP)
                )
            else:
                everyone = True
        keys = list(self.waiters) if everyone else [*streams, ""]
        for key in keys:
            for woken in self.waiters.get(key, ()):
                woken.set()

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        with contextlib.suppress(OSError):
            self.name_file.unlink()
