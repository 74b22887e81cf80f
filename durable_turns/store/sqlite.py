"""SQLite transcript store (WAL), the embedded default.

Uses the standard library's sqlite3 on a worker thread: writes are small and few per step,
and WAL lets several worker processes and readers share the file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from durable_turns.messages import Message
from durable_turns.sqlite_wal import SQLiteFile
from durable_turns.store.base import (
    StepRecord,
    StoreUnavailable,
    ToolResultRecord,
    TranscriptStore,
    TurnNotOwned,
    TurnRecord,
    TurnState,
    claim_decision,
    claimed,
    kept_record,
    owns,
    parse_marked_messages,
    parse_messages,
    parse_steps,
    parse_tool_results,
)

T = TypeVar("T")

MESSAGES = (
    "SELECT body FROM messages WHERE conversation_id = ? AND superseded_by IS NULL ORDER BY seq"
)
ALL_MESSAGES = "SELECT body, superseded_by FROM messages WHERE conversation_id = ? ORDER BY seq"
SUPERSEDED = "SELECT id FROM messages WHERE conversation_id = ? AND superseded_by = ? ORDER BY seq"
STEPS = "SELECT body FROM steps WHERE turn_id = ? AND run = ? ORDER BY step"
TOOL_RESULTS = "SELECT body FROM tool_results WHERE turn_id = ?"

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    id TEXT NOT NULL,
    role TEXT NOT NULL,
    turn_id TEXT,
    body TEXT NOT NULL,
    superseded_by TEXT,
    UNIQUE (conversation_id, id)
);
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    turn_number INTEGER NOT NULL,
    body TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS turns_by_conversation ON turns (conversation_id, turn_number);
CREATE TABLE IF NOT EXISTS steps (
    turn_id TEXT NOT NULL,
    run INTEGER NOT NULL,
    step INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (turn_id, run, step)
);
CREATE TABLE IF NOT EXISTS tool_results (
    turn_id TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (turn_id, tool_call_id)
);
"""

_UNAVAILABLE = ("locked", "busy", "unable to open", "disk i/o")
"""sqlite3.OperationalError messages that say "not now" rather than "wrong"."""


def _unavailable(error: sqlite3.OperationalError) -> bool:
    return any(word in str(error).lower() for word in _UNAVAILABLE)


class SQLiteStore(SQLiteFile, TranscriptStore):
    schema = SCHEMA

    async def open(self) -> None:
        await super().open()
        await self._on_thread(self._migrate)

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        """Files written before turn owners existed get the ``owner`` column, files written
        before regeneration the ``superseded_by`` column (NULL: not superseded)."""
        for table, column, ddl in (
            ("turns", "owner", "owner TEXT NOT NULL DEFAULT ''"),
            ("messages", "superseded_by", "superseded_by TEXT"),
        ):
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column in columns:
                continue
            try:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {ddl}")
            except sqlite3.OperationalError as e:  # another process added it meanwhile
                if "duplicate column" not in str(e):
                    raise

    async def _run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return await self._txn(lambda conn: conn.execute(sql, params).fetchall(), single=True)

    async def _txn(
        self,
        fn: Callable[[sqlite3.Connection], T],
        single: bool = False,
        snapshot: bool = False,
    ) -> T:
        """``fn`` in one write transaction (``single``: one read statement, autocommit;
        ``snapshot``: reads only, in one read transaction), at once or on a worker thread
        (``SQLiteFile._call``); "database is locked" past the busy timeout is
        StoreUnavailable."""
        try:
            if single:
                return await self._call(fn, write=False)
            return await self._transaction(fn, write=not snapshot)
        except sqlite3.OperationalError as e:
            if _unavailable(e):
                raise StoreUnavailable(f"SQLite store {self.path}: {e}") from e
            raise

    @staticmethod
    def _check_owner(conn: sqlite3.Connection, turn_id: str | None, owner: str | None) -> None:
        if not owner or turn_id is None:
            return
        row = conn.execute("SELECT owner FROM turns WHERE turn_id = ?", (turn_id,)).fetchone()
        if not owns(row[0] if row else None, owner):
            raise TurnNotOwned(turn_id, row[0] if row else None)

    # messages
    async def add_messages(
        self,
        conversation_id: str,
        messages: list[Message],
        turn_id: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        def run(conn: sqlite3.Connection) -> None:
            self._check_owner(conn, turn_id, owner)
            for m in messages:
                conn.execute(
                    "INSERT OR IGNORE INTO messages (conversation_id, id, role, turn_id, body)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (conversation_id, m.id, m.role, turn_id, m.model_dump_json()),
                )

        await self._txn(run)

    async def put_message(
        self,
        conversation_id: str,
        message: Message,
        turn_id: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        def run(conn: sqlite3.Connection) -> None:
            self._check_owner(conn, turn_id, owner)
            conn.execute(
                "INSERT INTO messages (conversation_id, id, role, turn_id, body)"
                " VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (conversation_id, id) DO UPDATE SET body = excluded.body",
                (conversation_id, message.id, message.role, turn_id, message.model_dump_json()),
            )

        await self._txn(run)

    async def messages(self, conversation_id: str, *, superseded: bool = False) -> list[Message]:
        if superseded:
            rows = await self._run(ALL_MESSAGES, (conversation_id,))
            return parse_marked_messages((body, by) for (body, by) in rows)
        rows = await self._run(MESSAGES, (conversation_id,))
        return parse_messages(body for (body,) in rows)

    async def supersede_messages(
        self,
        conversation_id: str,
        from_message_id: str | None,
        turn_id: str,
        *,
        owner: str | None = None,
    ) -> list[str]:
        def run(conn: sqlite3.Connection) -> list[str]:
            self._check_owner(conn, turn_id, owner)
            done = conn.execute(SUPERSEDED, (conversation_id, turn_id)).fetchall()
            if done or from_message_id is None:
                return [id for (id,) in done]
            row = conn.execute(
                "SELECT seq FROM messages"
                " WHERE conversation_id = ? AND id = ? AND superseded_by IS NULL",
                (conversation_id, from_message_id),
            ).fetchone()
            if row is None:
                return []
            conn.execute(
                "UPDATE messages SET superseded_by = ?"
                " WHERE conversation_id = ? AND seq >= ? AND superseded_by IS NULL",
                (turn_id, conversation_id, row[0]),
            )
            return [id for (id,) in conn.execute(SUPERSEDED, (conversation_id, turn_id))]

        return await self._txn(run)

    # turns
    @staticmethod
    def _upsert_turn(conn: sqlite3.Connection, turn: TurnRecord) -> None:
        conn.execute(
            "INSERT INTO turns (turn_id, conversation_id, turn_number, body, owner)"
            " VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (turn_id) DO UPDATE SET body = excluded.body, owner = excluded.owner",
            (
                turn.turn_id,
                turn.conversation_id,
                turn.turn_number,
                turn.model_dump_json(),
                turn.owner,
            ),
        )

    @staticmethod
    def _get_turn(conn: sqlite3.Connection, turn_id: str) -> TurnRecord | None:
        row = conn.execute("SELECT body FROM turns WHERE turn_id = ?", (turn_id,)).fetchone()
        return TurnRecord.model_validate_json(row[0]) if row else None

    async def save_turn(self, turn: TurnRecord) -> None:
        def run(conn: sqlite3.Connection) -> None:
            current = self._get_turn(conn, turn.turn_id)
            if current is not None:
                if not owns(current.owner, turn.owner):
                    raise TurnNotOwned(turn.turn_id, current.owner)
                self._upsert_turn(conn, kept_record(current, turn))
            else:
                self._upsert_turn(conn, turn)

        await self._txn(run)

    async def claim_turn(self, turn: TurnRecord) -> TurnRecord | None:
        def run(conn: sqlite3.Connection) -> TurnRecord | None:
            current = self._get_turn(conn, turn.turn_id)
            decision = claim_decision(current, turn)
            if decision == "refuse":
                return None
            record = turn
            if decision == "keep" and current is not None:
                record = claimed(current, turn)
            if decision == "take_over":
                for table in ("steps", "tool_results"):
                    conn.execute(f"DELETE FROM {table} WHERE turn_id = ?", (turn.turn_id,))
                conn.execute(
                    "DELETE FROM messages WHERE conversation_id = ? AND turn_id = ?",
                    (turn.conversation_id, turn.turn_id),
                )
                conn.execute(
                    "UPDATE messages SET superseded_by = NULL"
                    " WHERE conversation_id = ? AND superseded_by = ?",
                    (turn.conversation_id, turn.turn_id),
                )
            self._upsert_turn(conn, record)
            return record

        return await self._txn(run)

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        return await self._txn(lambda conn: self._get_turn(conn, turn_id), single=True)

    async def last_turn_number(self, conversation_id: str) -> int:
        rows = await self._run(
            "SELECT COALESCE(MAX(turn_number), 0) FROM turns WHERE conversation_id = ?",
            (conversation_id,),
        )
        return int(rows[0][0])

    # steps
    async def save_step(
        self, turn_id: str, step: StepRecord, *, owner: str | None = None
    ) -> StepRecord:
        def run(conn: sqlite3.Connection) -> str:
            self._check_owner(conn, turn_id, owner)
            conn.execute(
                "INSERT OR IGNORE INTO steps (turn_id, run, step, body) VALUES (?, ?, ?, ?)",
                (turn_id, step.run, step.step, step.model_dump_json()),
            )
            row = conn.execute(
                "SELECT body FROM steps WHERE turn_id = ? AND run = ? AND step = ?",
                (turn_id, step.run, step.step),
            ).fetchone()
            return str(row[0])

        return StepRecord.model_validate_json(await self._txn(run))

    async def steps(self, turn_id: str, run: int) -> list[StepRecord]:
        rows = await self._run(STEPS, (turn_id, run))
        return parse_steps(body for (body,) in rows)

    # all of a turn at once
    async def turn_state(self, turn_id: str, *, transcript: bool = False) -> TurnState | None:
        def read(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            # One read transaction: a consistent snapshot, one trip to the store's thread.
            turn = self._get_turn(conn, turn_id)
            if turn is None:
                return None
            steps = conn.execute(STEPS, (turn_id, turn.run)).fetchall()
            results = conn.execute(TOOL_RESULTS, (turn_id,)).fetchall()
            messages = (
                conn.execute(MESSAGES, (turn.conversation_id,)).fetchall() if transcript else None
            )
            return turn, steps, results, messages

        # the bodies are parsed here, after the store's lock is released
        found = await self._txn(read, snapshot=True)
        if found is None:
            return None
        turn, steps, results, messages = found
        return TurnState(
            turn=turn,
            steps=parse_steps(body for (body,) in steps),
            results=parse_tool_results(body for (body,) in results),
            transcript=None if messages is None else parse_messages(body for (body,) in messages),
        )

    # tool results
    async def save_tool_result(
        self, turn_id: str, result: ToolResultRecord, *, owner: str | None = None
    ) -> ToolResultRecord:
        def run(conn: sqlite3.Connection) -> str:
            self._check_owner(conn, turn_id, owner)
            conn.execute(
                "INSERT OR IGNORE INTO tool_results (turn_id, tool_call_id, body) VALUES (?, ?, ?)",
                (turn_id, result.tool_call_id, result.model_dump_json()),
            )
            row = conn.execute(
                "SELECT body FROM tool_results WHERE turn_id = ? AND tool_call_id = ?",
                (turn_id, result.tool_call_id),
            ).fetchone()
            return str(row[0])

        return ToolResultRecord.model_validate_json(await self._txn(run))

    async def tool_results(self, turn_id: str) -> dict[str, ToolResultRecord]:
        rows = await self._run(TOOL_RESULTS, (turn_id,))
        return parse_tool_results(body for (body,) in rows)
