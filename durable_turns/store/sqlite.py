"""SQLite transcript store (WAL), the embedded default.

Uses the standard library's sqlite3 on a worker thread: writes are small and few per step,
and WAL lets several worker processes and readers share the file.
"""

from __future__ import annotations

import asyncio
from typing import Any

from durable_turns.messages import Message
from durable_turns.sqlite_wal import SQLiteFile
from durable_turns.store.base import StepRecord, ToolResultRecord, TranscriptStore, TurnRecord

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    id TEXT NOT NULL,
    role TEXT NOT NULL,
    turn_id TEXT,
    body TEXT NOT NULL,
    UNIQUE (conversation_id, id)
);
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    turn_number INTEGER NOT NULL,
    body TEXT NOT NULL
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


class SQLiteStore(SQLiteFile, TranscriptStore):
    schema = SCHEMA

    async def _run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return await asyncio.to_thread(self._run_sync, [(sql, params)])

    async def _run_many(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        await asyncio.to_thread(self._run_sync, statements)

    def _run_sync(self, statements: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
        conn = self._db()
        with self._lock:
            if len(statements) == 1:
                return conn.execute(*statements[0]).fetchall()
            conn.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    conn.execute(sql, params)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return []

    # messages
    async def add_messages(
        self, conversation_id: str, messages: list[Message], turn_id: str | None = None
    ) -> None:
        await self._run_many(
            [
                (
                    "INSERT OR IGNORE INTO messages (conversation_id, id, role, turn_id, body)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (conversation_id, m.id, m.role, turn_id, m.model_dump_json()),
                )
                for m in messages
            ]
        )

    async def put_message(
        self, conversation_id: str, message: Message, turn_id: str | None = None
    ) -> None:
        await self._run(
            "INSERT INTO messages (conversation_id, id, role, turn_id, body) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (conversation_id, id) DO UPDATE SET body = excluded.body",
            (conversation_id, message.id, message.role, turn_id, message.model_dump_json()),
        )

    async def messages(self, conversation_id: str) -> list[Message]:
        rows = await self._run(
            "SELECT body FROM messages WHERE conversation_id = ? ORDER BY seq", (conversation_id,)
        )
        return [Message.model_validate_json(body) for (body,) in rows]

    # turns
    async def save_turn(self, turn: TurnRecord) -> None:
        await self._run(
            "INSERT INTO turns (turn_id, conversation_id, turn_number, body) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (turn_id) DO UPDATE SET body = excluded.body",
            (turn.turn_id, turn.conversation_id, turn.turn_number, turn.model_dump_json()),
        )

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        rows = await self._run("SELECT body FROM turns WHERE turn_id = ?", (turn_id,))
        return TurnRecord.model_validate_json(rows[0][0]) if rows else None

    async def last_turn_number(self, conversation_id: str) -> int:
        rows = await self._run(
            "SELECT COALESCE(MAX(turn_number), 0) FROM turns WHERE conversation_id = ?",
            (conversation_id,),
        )
        return int(rows[0][0])

    # steps
    async def save_step(self, turn_id: str, step: StepRecord) -> StepRecord:
        await self._run(
            "INSERT OR IGNORE INTO steps (turn_id, run, step, body) VALUES (?, ?, ?, ?)",
            (turn_id, step.run, step.step, step.model_dump_json()),
        )
        rows = await self._run(
            "SELECT body FROM steps WHERE turn_id = ? AND run = ? AND step = ?",
            (turn_id, step.run, step.step),
        )
        return StepRecord.model_validate_json(rows[0][0])

    async def steps(self, turn_id: str, run: int) -> list[StepRecord]:
        rows = await self._run(
            "SELECT body FROM steps WHERE turn_id = ? AND run = ? ORDER BY step", (turn_id, run)
        )
        return [StepRecord.model_validate_json(body) for (body,) in rows]

    # tool results
    async def save_tool_result(self, turn_id: str, result: ToolResultRecord) -> ToolResultRecord:
        await self._run(
            "INSERT OR IGNORE INTO tool_results (turn_id, tool_call_id, body) VALUES (?, ?, ?)",
            (turn_id, result.tool_call_id, result.model_dump_json()),
        )
        rows = await self._run(
            "SELECT body FROM tool_results WHERE turn_id = ? AND tool_call_id = ?",
            (turn_id, result.tool_call_id),
        )
        return ToolResultRecord.model_validate_json(rows[0][0])

    async def tool_results(self, turn_id: str) -> dict[str, ToolResultRecord]:
        rows = await self._run("SELECT body FROM tool_results WHERE turn_id = ?", (turn_id,))
        records = [ToolResultRecord.model_validate_json(body) for (body,) in rows]
        return {r.tool_call_id: r for r in records}
