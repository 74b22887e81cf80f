"""Opening a SQLite file in WAL mode, safely from several processes at once."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import ClassVar


def connect_wal(path: str, schema: str) -> sqlite3.Connection:
    """A connection in WAL mode (autocommit, 30 s busy timeout) with ``schema`` applied.

    Switching a new file to WAL fails with "database is locked" when another process does
    the same, without waiting on busy_timeout; workers start together, so retry it.
    """
    conn = sqlite3.connect(path, check_same_thread=False, timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
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
    return conn


def sqlite_path(url: str) -> str:
    """``sqlite:///rel.db`` → ``rel.db``; ``sqlite:////abs.db`` → ``/abs.db``; bare → memory."""
    path = url.removeprefix("sqlite://")
    if path.startswith("/"):
        path = path[1:]
    return path or ":memory:"


class SQLiteFile:
    """One WAL connection to a file, opened on a worker thread; subclasses set ``schema``."""

    schema: ClassVar[str] = ""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    async def open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = await asyncio.to_thread(connect_wal, self.path, self.schema)

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await asyncio.to_thread(conn.close)

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"{type(self).__name__} is not open")
        return self._conn
