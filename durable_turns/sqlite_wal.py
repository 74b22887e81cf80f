"""A SQLite file in WAL mode, shared safely by several processes, cheap per transaction.

Each :class:`SQLiteFile` holds one connection. A transaction runs at once on the event loop
when that costs no wait, and on a worker thread when it might (:meth:`SQLiteFile._call`):
a small transaction takes ~40 µs here, a trip to a thread and back ~150 µs more, and a
turn makes a dozen of them. Nothing slow is left on the loop: SQLite's locks are taken
without waiting there (a busy file sends the transaction to a thread, which waits up to the
busy timeout), and the log's checkpoints, which sync the disk, run on a thread.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, TypeVar

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
"""How long a transaction on a worker thread waits for another process's lock."""

CHECKPOINT_EVERY = 100
"""Write transactions of this connection between two checkpoints of the log."""


def connect_wal(path: str, schema: str) -> sqlite3.Connection:
    """A connection in WAL mode (autocommit) with ``schema`` applied, left with no busy
    timeout and no automatic checkpoints (:class:`SQLiteFile` waits and checkpoints on its
    worker threads).

    Switching a new file to WAL fails with "database is locked" when another process does
    the same, without waiting on busy_timeout; workers start together, so retry it.
    """
    conn = sqlite3.connect(path, check_same_thread=False, timeout=30, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    for attempt in range(100):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or attempt == 99:
                conn.close()
                raise
            time.sleep(0.02)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(schema)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("PRAGMA busy_timeout=0")
    return conn


def busy(error: sqlite3.Error) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (any extended code): another connection holds a lock."""
    return error.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def sqlite_path(url: str) -> str:
    """``sqlite:///rel.db`` → ``rel.db``; ``sqlite:////abs.db`` → ``/abs.db``; bare → memory."""
    path = url.removeprefix("sqlite://")
    if path.startswith("/"):
        path = path[1:]
    return path or ":memory:"


class SQLiteFile:
    """One WAL connection to a file, opened on a worker thread; subclasses set ``schema``."""

    schema: ClassVar[str] = ""
    busy_timeout_ms: int = BUSY_TIMEOUT_MS

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._writes = 0
        self._checkpoints: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = await asyncio.to_thread(connect_wal, self.path, self.schema)

    async def close(self) -> None:
        if self._conn is not None:
            for task in list(self._checkpoints):
                await task
            conn, self._conn = self._conn, None

            def close() -> None:
                with self._lock:  # a thread's transaction ends first
                    conn.close()

            await asyncio.to_thread(close)

    async def _call(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        """``fn(conn)`` under the connection's lock: at once when that costs no wait, else
        on a worker thread (:meth:`_on_thread`).

        At once means: the lock is free and SQLite takes its file locks without waiting
        (the connection's busy timeout is 0). When SQLite says busy, ``fn`` is run again on
        a thread; so ``fn`` is one transaction, or one statement, that a busy error leaves
        undone. Every ``CHECKPOINT_EVERY``-th write also checkpoints the log on a thread.
        """
        conn = self._db()
        result: T
        waits = not self._lock.acquire(blocking=False)
        if not waits:
            try:
                result = fn(conn)
            except sqlite3.OperationalError as e:
                if not busy(e):
                    raise
                waits = True
            finally:
                self._lock.release()
        if waits:
            result = await self._on_thread(fn)
        if write:
            self._wrote()
        return result

    async def _transaction(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        """``fn(conn)`` in one transaction, committed, or rolled back on any error: a write
        (``BEGIN IMMEDIATE``, the file's write lock) or a consistent read (``BEGIN DEFERRED``),
        run by :meth:`_call`."""

        def run(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return result

        return await self._call(run, write=write)

    async def _on_thread(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(conn)`` on a worker thread, under the lock, waiting for busy locks up to
        ``busy_timeout_ms`` (past it: "database is locked")."""
        conn = self._db()

        def run() -> T:
            with self._lock:
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_ms)}")
                try:
                    return fn(conn)
                finally:
                    conn.execute("PRAGMA busy_timeout=0")

        return await asyncio.to_thread(run)

    def _wrote(self) -> None:
        self._writes += 1
        if self._writes % CHECKPOINT_EVERY == 0 and not self._checkpoints:
            task = asyncio.get_running_loop().create_task(self._checkpoint())
            self._checkpoints.add(task)
            task.add_done_callback(self._checkpoints.discard)

    async def _checkpoint(self) -> None:
        """Copy the log into the file (PASSIVE: never waits on readers or writers)."""
        if self._conn is None:
            return
        try:
            await self._on_thread(
                lambda conn: conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            )
        except sqlite3.Error:
            pass  # the next one catches up; the log is never lost, only longer

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"{type(self).__name__} is not open")
        return self._conn
