"""PostgreSQL transcript store: the scale-out store for several worker machines.

The SQLite store is one file on one machine; its WAL lets several worker *processes* on that
machine share it, but not workers on several machines. When turns run on a fleet of workers
(any of which may pick up any activity of any turn), they all need one transcript, and this
store keeps it in PostgreSQL through an asyncpg connection pool.

Semantics are those of :class:`~durable_turns.store.sqlite.SQLiteStore`, enforced by keys and
``ON CONFLICT`` so that retried or concurrent activities on different machines never
duplicate a row:

* ``messages``: ordered by a ``bigserial`` ``seq`` (insertion order), unique by
  ``(conversation_id, id)``; ``add_messages`` inserts or ignores, one batch per conversation
  at a time (a transaction-scoped advisory lock), so a batch is never interleaved with
  another; ``put_message`` upserts and keeps the message's original position.
* ``turns``: keyed by ``turn_id``, upserted; ``owner`` is the workflow run the turn belongs to
  (``claim_turn``). A write naming an owner first takes the turn's row ``FOR SHARE`` and
  checks it, and a take-over holds the row ``FOR UPDATE`` while it deletes the old run's
  rows: a write and a take-over never interleave.
* ``steps``: keyed by ``(turn_id, run, step)``; the first write wins and ``save_step``
  returns the stored record.
* ``tool_results``: keyed by ``(turn_id, tool_call_id)``; the first write wins.

Bodies are stored as ``TEXT`` holding the JSON that pydantic wrote, not as ``JSONB``: the
store never queries inside a body, so ``JSONB`` would only add a parse on every write and
a re-serialisation on every read, and it would not round-trip every body. ``JSONB`` rejects
the ``\\u0000`` escape (a NUL in a tool output or a model's text would make the write fail)
and it rewrites key order and number formatting. ``TEXT`` returns exactly the bytes written.
If a query ever needs to look inside bodies, a migration can add a ``JSONB`` column or an
expression index.

Schema. :meth:`PostgresStore.open` creates or migrates the schema. The ``schema_version``
table records each applied migration from :data:`MIGRATIONS` (numbered from 1; append, never
edit one that has shipped). All of ``open()`` runs in one transaction holding
``pg_advisory_xact_lock``, so worker processes that start together serialise on it: the
first applies the pending migrations, the rest find nothing to do. A database migrated
by newer code than this (a version above the highest known here) is refused, rather
than written to with an outdated idea of its tables.

URLs: ``postgresql://user[:password]@host[:port]/database`` or ``postgres://…``, with any
query parameters asyncpg accepts (``sslmode=…``). This store also reads ``schema=NAME``:
the tables then live in that PostgreSQL schema (created if missing), so several
deployments, or test runs, can share one database.

Why it is long (about 560 lines): the SQL of each of the store interface's operations, with
the locking each needs, and this account of it; one backend, one module, as ``sqlite.py``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import re
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from durable_turns.messages import Message
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
    mask_url,
    owns,
    parse_marked_messages,
    parse_messages,
    parse_steps,
    parse_tool_results,
)

MESSAGES = (
    "SELECT body FROM messages WHERE conversation_id = $1 AND superseded_by IS NULL ORDER BY seq"
)
ALL_MESSAGES = "SELECT body, superseded_by FROM messages WHERE conversation_id = $1 ORDER BY seq"
SUPERSEDED = (
    "SELECT id FROM messages WHERE conversation_id = $1 AND superseded_by = $2 ORDER BY seq"
)
STEPS = "SELECT body FROM steps WHERE turn_id = $1 AND run = $2 ORDER BY step"
TOOL_RESULTS = "SELECT body FROM tool_results WHERE turn_id = $1 ORDER BY tool_call_id"

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE TABLE messages (
            seq bigserial PRIMARY KEY,
            conversation_id text NOT NULL,
            id text NOT NULL,
            role text NOT NULL,
            turn_id text,
            body text NOT NULL,
            UNIQUE (conversation_id, id)
        );
        CREATE INDEX messages_by_conversation ON messages (conversation_id, seq);
        CREATE TABLE turns (
            turn_id text PRIMARY KEY,
            conversation_id text NOT NULL,
            turn_number integer NOT NULL,
            body text NOT NULL
        );
        CREATE INDEX turns_by_conversation ON turns (conversation_id, turn_number);
        CREATE TABLE steps (
            turn_id text NOT NULL,
            run integer NOT NULL,
            step integer NOT NULL,
            body text NOT NULL,
            PRIMARY KEY (turn_id, run, step)
        );
        CREATE TABLE tool_results (
            turn_id text NOT NULL,
            tool_call_id text NOT NULL,
            body text NOT NULL,
            PRIMARY KEY (turn_id, tool_call_id)
        );
        """,
    ),
    (
        2,
        """
        ALTER TABLE turns ADD COLUMN owner text NOT NULL DEFAULT '';
        CREATE INDEX messages_by_turn ON messages (turn_id);
        """,
    ),
    (
        3,
        """
        ALTER TABLE messages ADD COLUMN superseded_by text;
        CREATE INDEX messages_superseded ON messages (conversation_id, superseded_by)
            WHERE superseded_by IS NOT NULL;
        """,
    ),
]
"""Numbered schema migrations, applied in order; append new ones, never edit shipped ones."""

SCHEMA_VERSION = MIGRATIONS[-1][0]
"""The schema version this code writes."""

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_CONVERSATION_LOCK_CLASS = 0x7475726E  # "turn"; two-int4 advisory keys never meet bigint ones


P = ParamSpec("P")
R = TypeVar("R")

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable
    asyncio.TimeoutError,  # connecting timed out
    asyncpg.PostgresConnectionError,  # class 08, and a connection lost mid-operation
    asyncpg.CannotConnectNowError,  # the server is starting or shutting down
    asyncpg.exceptions.OperatorInterventionError,  # admin or crash shutdown
    asyncpg.TooManyConnectionsError,
)


def _is_unavailable(error: BaseException) -> bool:
    if isinstance(error, _UNAVAILABLE):
        return True
    # a pooled connection that died with its server, used before the pool noticed
    return isinstance(error, asyncpg.InterfaceError) and "closed" in str(error)


def _available(
    method: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """Connection failures become StoreUnavailable: the caller may retry the same call."""

    @functools.wraps(method)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except Exception as e:
            if _is_unavailable(e):
                raise StoreUnavailable(f"PostgreSQL store: {type(e).__name__}: {e}") from e
            raise

    return call


def _lock_key(schema: str | None) -> int:
    """A stable signed 64-bit advisory lock key for migrating one schema."""
    digest = hashlib.sha256(f"durable-turns:schema:{schema or ''}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _int32_key(value: str) -> int:
    """A stable signed 32-bit advisory lock key for a string (a conversation id)."""
    return int.from_bytes(hashlib.sha256(value.encode()).digest()[:4], "big", signed=True)


def _split_url(url: str) -> tuple[str, str | None]:
    """Remove this store's own ``schema`` query parameter; return (asyncpg DSN, schema)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"not a PostgreSQL URL: {mask_url(url)!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    rest = [(k, v) for k, v in query if k != "schema"]
    return urlunsplit(parts._replace(query=urlencode(rest))), (schemas[-1] if schemas else None)


class PostgresStore(TranscriptStore):
    """Transcript store on PostgreSQL (asyncpg pool); see the module docstring."""

    def __init__(
        self, url: str, *, schema: str | None = None, min_size: int = 1, max_size: int = 10
    ) -> None:
        self.dsn, url_schema = _split_url(url)
        self.schema = schema or url_schema or None
        if self.schema is not None and not _SCHEMA_NAME.fullmatch(self.schema):
            raise ValueError(f"invalid PostgreSQL schema name {self.schema!r}")
        self.min_size = min_size
        self.max_size = max_size
        self._pool: asyncpg.Pool | None = None

    def __repr__(self) -> str:
        parts = urlsplit(self.dsn)  # without the user and password
        where = parts.netloc.rpartition("@")[2] + parts.path
        return f"PostgresStore({where!r}, schema={self.schema!r})"

    # lifecycle
    async def open(self) -> None:
        if self._pool is not None:
            return
        settings = {"search_path": f'"{self.schema}"'} if self.schema else None
        try:
            pool = await asyncpg.create_pool(
                self.dsn, min_size=self.min_size, max_size=self.max_size, server_settings=settings
            )
        except Exception as e:
            password = urlsplit(self.dsn).password
            if password and password in str(e):  # never print the password
                masked = str(e).replace(password, "***")
                raise ConnectionError(f"{type(e).__name__}: {masked}") from None
            raise
        try:
            async with pool.acquire() as conn:
                await self._migrate(conn)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool

    async def _migrate(self, conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1::bigint)", _lock_key(self.schema))
            if self.schema is not None:
                exists = await conn.fetchval(
                    "SELECT 1 FROM pg_namespace WHERE nspname = $1", self.schema
                )
                if not exists:
                    await conn.execute(f'CREATE SCHEMA "{self.schema}"')
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                " version integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            current = await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version")
            if current > SCHEMA_VERSION:
                raise RuntimeError(
                    f"the transcript store schema is at version {current}, newer than this"
                    f" code's {SCHEMA_VERSION}: upgrade durable-turns on this worker"
                )
            for version, sql in MIGRATIONS:
                if version > current:
                    await conn.execute(sql)
                    await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", version)

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("PostgresStore is not open")
        return self._pool

    async def _check_owner(
        self, conn: asyncpg.Connection, turn_id: str | None, owner: str | None
    ) -> None:
        """Within a transaction: hold the turn's row (FOR SHARE) and check its owner."""
        if not owner or turn_id is None:
            return
        current = await conn.fetchval(
            "SELECT owner FROM turns WHERE turn_id = $1 FOR SHARE", turn_id
        )
        if not owns(current, owner):
            raise TurnNotOwned(turn_id, current)

    @_available
    async def schema_version(self) -> int:
        """The schema version recorded in the database."""
        return int(await self.pool.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version"))

    # messages
    @_available
    async def add_messages(
        self,
        conversation_id: str,
        messages: list[Message],
        turn_id: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        if not messages:
            return
        rows = [(conversation_id, m.id, m.role, turn_id, m.model_dump_json()) for m in messages]
        async with self.pool.acquire() as conn, conn.transaction():
            await self._check_owner(conn, turn_id, owner)
            # One batch at a time per conversation: a batch's messages stay together in the
            # transcript, and two batches holding the same ids in different orders cannot
            # deadlock on each other's rows.
            await conn.execute(
                "SELECT pg_advisory_xact_lock($1::integer, $2::integer)",
                _CONVERSATION_LOCK_CLASS,
                _int32_key(conversation_id),
            )
            await conn.executemany(
                "INSERT INTO messages (conversation_id, id, role, turn_id, body)"
                " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (conversation_id, id) DO NOTHING",
                rows,
            )

    @_available
    async def put_message(
        self,
        conversation_id: str,
        message: Message,
        turn_id: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await self._check_owner(conn, turn_id, owner)
            await conn.execute(
                "INSERT INTO messages (conversation_id, id, role, turn_id, body)"
                " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (conversation_id, id)"
                " DO UPDATE SET body = excluded.body, role = excluded.role",
                conversation_id,
                message.id,
                message.role,
                turn_id,
                message.model_dump_json(),
            )

    @_available
    async def messages(self, conversation_id: str, *, superseded: bool = False) -> list[Message]:
        if superseded:
            rows = await self.pool.fetch(ALL_MESSAGES, conversation_id)
            return parse_marked_messages((r["body"], r["superseded_by"]) for r in rows)
        rows = await self.pool.fetch(MESSAGES, conversation_id)
        return parse_messages(r["body"] for r in rows)

    @_available
    async def supersede_messages(
        self,
        conversation_id: str,
        from_message_id: str | None,
        turn_id: str,
        *,
        owner: str | None = None,
    ) -> list[str]:
        async with self.pool.acquire() as conn, conn.transaction():
            await self._check_owner(conn, turn_id, owner)
            # one writer at a time per conversation, as add_messages: the check and the mark
            # of two attempts of one turn never interleave
            await conn.execute(
                "SELECT pg_advisory_xact_lock($1::integer, $2::integer)",
                _CONVERSATION_LOCK_CLASS,
                _int32_key(conversation_id),
            )
            done = await conn.fetch(SUPERSEDED, conversation_id, turn_id)
            if done or from_message_id is None:
                return [r["id"] for r in done]
            seq = await conn.fetchval(
                "SELECT seq FROM messages"
                " WHERE conversation_id = $1 AND id = $2 AND superseded_by IS NULL",
                conversation_id,
                from_message_id,
            )
            if seq is None:
                return []
            await conn.execute(
                "UPDATE messages SET superseded_by = $1"
                " WHERE conversation_id = $2 AND seq >= $3 AND superseded_by IS NULL",
                turn_id,
                conversation_id,
                seq,
            )
            return [r["id"] for r in await conn.fetch(SUPERSEDED, conversation_id, turn_id)]

    # turns
    @staticmethod
    async def _upsert_turn(conn: asyncpg.Connection, turn: TurnRecord) -> None:
        await conn.execute(
            "INSERT INTO turns (turn_id, conversation_id, turn_number, body, owner)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (turn_id) DO UPDATE SET"
            " conversation_id = excluded.conversation_id,"
            " turn_number = excluded.turn_number, body = excluded.body, owner = excluded.owner",
            turn.turn_id,
            turn.conversation_id,
            turn.turn_number,
            turn.model_dump_json(),
            turn.owner,
        )

    @staticmethod
    async def _locked_turn(conn: asyncpg.Connection, turn_id: str) -> TurnRecord | None:
        body = await conn.fetchval("SELECT body FROM turns WHERE turn_id = $1 FOR UPDATE", turn_id)
        return TurnRecord.model_validate_json(body) if body is not None else None

    @_available
    async def save_turn(self, turn: TurnRecord) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            current = await self._locked_turn(conn, turn.turn_id)
            if current is not None:
                if not owns(current.owner, turn.owner):
                    raise TurnNotOwned(turn.turn_id, current.owner)
                turn = kept_record(current, turn)
            await self._upsert_turn(conn, turn)

    @_available
    async def claim_turn(self, turn: TurnRecord) -> TurnRecord | None:
        async with self.pool.acquire() as conn, conn.transaction():
            inserted = await conn.fetchval(
                "INSERT INTO turns (turn_id, conversation_id, turn_number, body, owner)"
                " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (turn_id) DO NOTHING RETURNING 1",
                turn.turn_id,
                turn.conversation_id,
                turn.turn_number,
                turn.model_dump_json(),
                turn.owner,
            )
            if inserted:
                return turn
            current = await self._locked_turn(conn, turn.turn_id)
            decision = claim_decision(current, turn)
            if decision == "refuse":
                return None
            if decision == "keep" and current is not None:
                turn = claimed(current, turn)
            if decision == "take_over":
                await conn.execute("DELETE FROM steps WHERE turn_id = $1", turn.turn_id)
                await conn.execute("DELETE FROM tool_results WHERE turn_id = $1", turn.turn_id)
                await conn.execute(
                    "DELETE FROM messages WHERE conversation_id = $1 AND turn_id = $2",
                    turn.conversation_id,
                    turn.turn_id,
                )
                await conn.execute(
                    "UPDATE messages SET superseded_by = NULL"
                    " WHERE conversation_id = $1 AND superseded_by = $2",
                    turn.conversation_id,
                    turn.turn_id,
                )
            await self._upsert_turn(conn, turn)
            return turn

    @_available
    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        body = await self.pool.fetchval("SELECT body FROM turns WHERE turn_id = $1", turn_id)
        return TurnRecord.model_validate_json(body) if body is not None else None

    @_available
    async def last_turn_number(self, conversation_id: str) -> int:
        value = await self.pool.fetchval(
            "SELECT COALESCE(MAX(turn_number), 0) FROM turns WHERE conversation_id = $1",
            conversation_id,
        )
        return int(value)

    # steps
    @_available
    async def save_step(
        self, turn_id: str, step: StepRecord, *, owner: str | None = None
    ) -> StepRecord:
        async with self.pool.acquire() as conn, conn.transaction():
            await self._check_owner(conn, turn_id, owner)
            # ON CONFLICT DO NOTHING returns no row for a key stored already: read it then.
            body = await conn.fetchval(
                "INSERT INTO steps (turn_id, run, step, body) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (turn_id, run, step) DO NOTHING RETURNING body",
                turn_id,
                step.run,
                step.step,
                step.model_dump_json(),
            )
        if body is None:
            # A new statement's snapshot (read committed) sees a row a concurrent insert of
            # the same key committed while this one waited on it.
            body = await self.pool.fetchval(
                "SELECT body FROM steps WHERE turn_id = $1 AND run = $2 AND step = $3",
                turn_id,
                step.run,
                step.step,
            )
        return StepRecord.model_validate_json(body)

    @_available
    async def steps(self, turn_id: str, run: int) -> list[StepRecord]:
        rows = await self.pool.fetch(STEPS, turn_id, run)
        return parse_steps(r["body"] for r in rows)

    # tool results
    @_available
    async def save_tool_result(
        self, turn_id: str, result: ToolResultRecord, *, owner: str | None = None
    ) -> ToolResultRecord:
        async with self.pool.acquire() as conn, conn.transaction():
            await self._check_owner(conn, turn_id, owner)
            body = await conn.fetchval(
                "INSERT INTO tool_results (turn_id, tool_call_id, body) VALUES ($1, $2, $3)"
                " ON CONFLICT (turn_id, tool_call_id) DO NOTHING RETURNING body",
                turn_id,
                result.tool_call_id,
                result.model_dump_json(),
            )
        if body is None:
            body = await self.pool.fetchval(
                "SELECT body FROM tool_results WHERE turn_id = $1 AND tool_call_id = $2",
                turn_id,
                result.tool_call_id,
            )
        return ToolResultRecord.model_validate_json(body)

    @_available
    async def tool_results(self, turn_id: str) -> dict[str, ToolResultRecord]:
        rows = await self.pool.fetch(TOOL_RESULTS, turn_id)
        return parse_tool_results(r["body"] for r in rows)

    # all of a turn at once
    @_available
    async def turn_state(self, turn_id: str, *, transcript: bool = False) -> TurnState | None:
        async with (
            self.pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            body = await conn.fetchval("SELECT body FROM turns WHERE turn_id = $1", turn_id)
            if body is None:
                return None
            turn = TurnRecord.model_validate_json(body)
            steps = await conn.fetch(STEPS, turn_id, turn.run)
            results = await conn.fetch(TOOL_RESULTS, turn_id)
            messages = await conn.fetch(MESSAGES, turn.conversation_id) if transcript else None
        return TurnState(
            turn=turn,
            steps=parse_steps(r["body"] for r in steps),
            results=parse_tool_results(r["body"] for r in results),
            transcript=None if messages is None else parse_messages(r["body"] for r in messages),
        )


__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresStore"]
