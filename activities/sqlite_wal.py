"""Opening a SQLite file in WAL mode, safely from several processes at once."""

from __future__ import annotations

import sqlite3
import time


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
