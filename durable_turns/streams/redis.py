"""Redis Streams chunk streams: one stream key per turn, one entry per batch.

Why one entry per batch (not per event): a flush then costs one round trip and O(1) server
work however many chunks it carries, and the bounded batch size (``max_batch``) keeps
entries small. Readers resuming mid-batch skip its first events client-side.

Offsets live in the entry IDs: the batch holding offsets ``first..last`` gets the ID
``(last + 1)-0``. A Lua script reads the stream's top ID and ``XADD``s after it, so the
range allocation is atomic across every process appending to the turn, and needs no
counter key. Reading after offset *k* is ``XRANGE`` from ID ``{k+2}-0``, following is
``XREAD BLOCK`` after ID ``{k+1}-0``: both exactly the batches with ``last > k``. Each
append trims with ``MAXLEN ~`` (the bound counts batches) and refreshes the key's TTL, so
finished turns vanish on their own.

A stream's owner (``streams.base.StreamClaim``) is a hash beside it, ``<stream key>:owner``
(a turn's stream id ends in its number, so no stream's key is another's claim), checked and
updated by the same Lua script that appends: the claim and the offsets move together. The
hash has the stream's TTL.

Appends are idempotent: the script keeps each writer's last batch number in another hash
beside the stream, ``<stream key>:writers`` (same TTL), and skips a batch it has already
appended, so an append whose answer was lost (a reset or blackholed link: Redis may run it
late) is written once when retried. Every command is bounded (``SOCKET_TIMEOUT_S``); a
follower retries a failed read from its offset.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from durable_turns.streams.base import (
    MARK_TTL_S,
    TURN_FINISH,
    ChunkStreamBackend,
    StreamClaim,
    StreamEvent,
    StreamNotOwned,
    decode_events,
    encode_batch,
    visible_after,
)
from durable_turns.streams.groups import AppendGroups, QueuedAppend

log = logging.getLogger(__name__)

APPEND_LUA = """
if ARGV[7] ~= '' then
    local seen = redis.call('HGET', KEYS[3], ARGV[7])
    if seen then
        local seq, last = string.match(seen, '^(%d+):(%-?%d+)$')
        if tonumber(seq) >= tonumber(ARGV[8]) then return {1, tonumber(last)} end
    end
end
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local first = 0
if top[1] then first = tonumber(string.match(top[1][1], '^(%d+)')) end
local owner, mine = ARGV[5], ARGV[6]
if owner ~= '' then
    local cur = redis.call('HMGET', KEYS[2], 'owner', 'by_conversation')
    if not cur[1] then
        redis.call('HSET', KEYS[2], 'owner', owner, 'by_conversation', mine, 'since', 0)
    elseif cur[1] ~= owner then
        if mine == '1' or cur[2] ~= '1' then
            redis.call('HSET', KEYS[2], 'owner', owner, 'by_conversation', mine, 'since', first)
        else
            return {0, cur[1]}
        end
    end
    if tonumber(ARGV[4]) > 0 then redis.call('EXPIRE', KEYS[2], ARGV[4]) end
end
local n = tonumber(ARGV[1])
local id = string.format('%d-0', first + n)
if tonumber(ARGV[3]) > 0 then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], id, 'e', ARGV[2])
else
    redis.call('XADD', KEYS[1], id, 'e', ARGV[2])
end
if tonumber(ARGV[4]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[3], ARGV[7], ARGV[8] .. ':' .. (first + n - 1))
    if tonumber(ARGV[4]) > 0 then redis.call('EXPIRE', KEYS[3], ARGV[4]) end
end
return {1, first + n - 1}
"""
"""KEYS: the stream, its claim, its writers. ARGV: event count, body, MAXLEN (0 = none), TTL
seconds (0 = none), the appending owner ('' = unchecked), '1' when that owner is the
conversation's run, the writer ('' = none), the batch's seq. Returns {1, last offset}, or
{0, the owner} when the append is refused (the rule of ``streams.base.claim_stream``). A
writer's batch whose seq is not above the last one it appended is not appended again (its
answer was lost, the append retried): {1, the last offset that writer got}."""

SOCKET_TIMEOUT_S = 5.0
"""How long one Redis command waits for its answer (and a connection for its connect)
before it fails, plus ``block_ms`` (a blocking ``XREAD`` waits that long on the server);
``socket_timeout``/``socket_connect_timeout`` in the URL override it (keep the former above
``block_ms``)."""

HEALTH_CHECK_S = 15
"""A pooled connection idle this long is checked with a PING before its next command."""

RETRIES = 2
"""redis-py's own retries of a command whose connection failed or timed out (then the
caller's: the publisher retries its appends, a follower its reads)."""

MAX_CONNECTIONS = 8192
"""The pool's bound on one process's connections to Redis (``max_connections=`` in the URL
overrides it). A follower holds one for its blocking ``XREAD``, so a process follows at most
this many streams at once (a front door: up to ``TURNS_HTTP_MAX_STREAMS``, 4,096, each read
once however many clients watch it); redis-py's own default, 100, made the 101st stream's
reads fail with ``MaxConnectionsError`` and retry. Connections are opened when needed; the
Redis server's own bound is its ``maxclients`` (10,000 by default)."""

PAGE = 256
"""Batches per XRANGE/XREAD round trip."""


def _ms(entry_id: bytes | str) -> int:
    raw = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(raw.partition("-")[0])


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _events(entry_id: bytes | str, fields: Mapping[Any, Any], after: int) -> list[StreamEvent]:
    """The events of one entry past ``after``: its ID ends the batch's offset range."""
    items = json.loads(fields[b"e"] if b"e" in fields else fields["e"])
    return decode_events(_ms(entry_id) - len(items), items, after)


class RedisStreamBackend(ChunkStreamBackend):
    """Per-turn Redis streams with TTL and approximate MAXLEN retention; many readers."""

    keeps_marks = True
    keeps_liveness = True

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "turns:chunks:",
        ttl_s: int = 24 * 3600,
        maxlen: int = 10_000,
        block_ms: int = 1000,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.ttl_s = ttl_s
        """Seconds a stream outlives its last append (0 = forever)."""
        self.maxlen = maxlen
        """Approximate bound on a stream's batches (0 = none); older ones are trimmed."""
        self.block_ms = block_ms
        self._redis: aioredis.Redis | None = None
        self._sha: str | None = None
        """The append script's SHA1, once Redis has it (``open``)."""
        self._groups = AppendGroups(self._commit_group)

    def key(self, stream_id: str) -> str:
        return f"{self.prefix}{stream_id}"

    def claim_key(self, stream_id: str) -> str:
        return f"{self.prefix}{stream_id}:owner"

    def writers_key(self, stream_id: str) -> str:
        return f"{self.prefix}{stream_id}:writers"

    def mark_key(self, key: str) -> str:
        """A cancel mark's key (no stream id holds a newline, so it is no stream's)."""
        return f"{self.prefix}cancel\n{key}"

    async def open(self) -> None:
        # Every command is bounded: a blackholed link fails it after SOCKET_TIMEOUT_S
        # instead of hanging (redis-py < 6 waits forever by default). A blocking XREAD
        # waits block_ms on the server first, so its bound is that much longer.
        client = aioredis.Redis.from_url(
            self.url,
            socket_timeout=SOCKET_TIMEOUT_S + self.block_ms / 1000,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            socket_keepalive=True,
            max_connections=MAX_CONNECTIONS,
            health_check_interval=HEALTH_CHECK_S,
            retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), RETRIES),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
        )
        await client.ping()
        self._redis = client
        self._sha = await client.script_load(APPEND_LUA)

    async def close(self) -> None:
        await self._groups.drain()  # the appends already queued are sent first
        if self._redis is not None:
            client, self._redis = self._redis, None
            await client.aclose()

    @property
    def client(self) -> aioredis.Redis:
        if self._redis is None:
            raise RuntimeError("RedisStreamBackend is not open")
        return self._redis

    async def append(
        self,
        stream_id: str,
        events: Sequence[Mapping[str, Any]],
        *,
        owner: str | None = None,
        by_conversation: bool = False,
        writer: str | None = None,
        seq: int = 0,
    ) -> int:
        if not events:
            return await self.last_offset(stream_id)
        queued = QueuedAppend(
            stream_id, encode_batch(events), len(events), owner, by_conversation, writer, seq
        )
        return await self._groups.submit(queued)

    async def _commit_group(self, group: list[QueuedAppend]) -> list[int | Exception]:
        """A group's appends (``streams.groups``) as one pipeline of the append script: one
        round trip. Each runs atomically on its own, as a single append does."""
        results = await self._pipelined(group)
        lost = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
        if lost:  # Redis forgot the script (a restart, SCRIPT FLUSH): load it, send those again
            self._sha = await self.client.script_load(APPEND_LUA)
            for i, result in zip(
                lost, await self._pipelined([group[i] for i in lost]), strict=True
            ):
                results[i] = result
        out: list[int | Exception] = []
        for q, result in zip(group, results, strict=True):
            if isinstance(result, Exception):
                out.append(result)
            else:
                ok, value = result
                out.append(int(value) if ok else StreamNotOwned(q.stream_id, _text(value)))
        return out

    async def _pipelined(self, group: list[QueuedAppend]) -> list[Any]:
        if self._sha is None:
            raise RuntimeError("RedisStreamBackend is not open")
        async with self.client.pipeline(transaction=False) as pipe:
            for q in group:
                sid = q.stream_id
                pipe.evalsha(
                    self._sha,
                    3,
                    self.key(sid),
                    self.claim_key(sid),
                    self.writers_key(sid),
                    q.n,
                    q.body,
                    self.maxlen,
                    self.ttl_s,
                    q.owner or "",
                    "1" if q.by_conversation else "0",
                    q.writer or "",
                    q.seq,
                )
            return list(await pipe.execute(raise_on_error=False))

    async def claim(self, stream_id: str) -> StreamClaim | None:
        owner, mine, since = await self.client.hmget(
            self.claim_key(stream_id), ["owner", "by_conversation", "since"]
        )
        if owner is None:
            return None
        return StreamClaim(owner=_text(owner), by_conversation=mine == b"1", since=int(since or 0))

    async def read(
        self,
        stream_id: str,
        after: int = -1,
        limit: int | None = None,
        *,
        by_conversation: bool = False,
    ) -> list[StreamEvent]:
        # the claim first: any owner after it is at least as entitled (claims only move on)
        start_after = visible_after(await self.claim(stream_id), after, by_conversation)
        if start_after is None:
            return []
        after = start_after
        key, start = self.key(stream_id), f"{after + 2}-0"
        out: list[StreamEvent] = []
        while limit is None or len(out) < limit:
            entries: Any = await self.client.xrange(key, min=start, max="+", count=PAGE)
            for entry_id, fields in entries:
                out.extend(_events(entry_id, fields, after))
            if len(entries) < PAGE:
                break
            start = f"{_ms(entries[-1][0]) + 1}-0"
        return out if limit is None else out[:limit]

    async def mark_cancel(self, key: str) -> bool:
        await self.client.set(self.mark_key(key), b"1", ex=int(MARK_TTL_S))
        return True

    async def cancel_marks(self, keys: Collection[str]) -> set[str]:
        wanted = list(keys)
        if not wanted:
            return set()
        found: list[Any] = await self.client.mget([self.mark_key(k) for k in wanted])
        return {k for k, v in zip(wanted, found, strict=True) if v is not None}

    def workers_key(self) -> str:
        """The hash of every worker's beat count (``streams.liveness``)."""
        return f"{self.prefix}liveness\nworkers"

    def attempts_key(self, worker: str) -> str:
        """The hash of one worker's running attempts."""
        return f"{self.prefix}liveness\n{worker}"

    async def beat(self, worker: str) -> None:
        await self.client.hincrby(self.workers_key(), worker, 1)

    async def beats(self) -> dict[str, int]:
        found: dict[Any, Any] = await self.client.hgetall(self.workers_key())
        return {_text(k): int(v) for k, v in found.items()}

    async def attempt_started(self, worker: str, key: str, body: str) -> None:
        await self.client.hset(self.attempts_key(worker), key, body)

    async def attempt_ended(self, worker: str, key: str) -> None:
        await self.client.hdel(self.attempts_key(worker), key)

    async def attempts_of(self, worker: str) -> dict[str, str]:
        found: dict[Any, Any] = await self.client.hgetall(self.attempts_key(worker))
        return {_text(k): _text(v) for k, v in found.items()}

    async def take_attempt(self, worker: str, key: str) -> bool:
        return bool(await self.client.hdel(self.attempts_key(worker), key))

    async def forget_worker(self, worker: str) -> None:
        await self.client.hdel(self.workers_key(), worker)
        await self.client.delete(self.attempts_key(worker))

    async def last_offset(self, stream_id: str) -> int:
        top: Any = await self.client.xrevrange(self.key(stream_id), max="+", min="-", count=1)
        return _ms(top[0][0]) - 1 if top else -1

    async def delete(self, stream_id: str) -> None:
        await self.client.delete(*self._keys(stream_id))

    def _keys(self, stream_id: str) -> tuple[str, str, str]:
        return self.key(stream_id), self.claim_key(stream_id), self.writers_key(stream_id)

    async def expire(self, stream_id: str, ttl_s: float) -> None:
        for key in self._keys(stream_id):
            await self.client.expire(key, max(int(ttl_s), 1))

    async def follow(
        self,
        stream_id: str,
        after: int = -1,
        *,
        poll_interval: float = 0.05,
        until_finished: bool = True,
        idle_timeout: float | None = None,
        by_conversation: bool = False,
    ) -> AsyncIterator[StreamEvent]:
        """Like the base ``follow``, but blocks in ``XREAD`` instead of polling.

        ``poll_interval`` is unused: new batches wake the reader at once. Each blocked
        reader holds one pooled connection. The stream's claim is read after each batch of
        entries: a claim only moves on, so what it leaves visible is its owner's (or a later,
        at least as entitled owner's); what it hides is skipped for good. A read that fails
        (Redis unreachable, a reset or blackholed link) is retried from the same offset after
        a pause (0.1 s, doubling to 2 s): the reader pauses and resumes where it was, with
        no gap and no repeat, and ``idle_timeout`` counts the outage as idle time.
        """
        key, cursor = self.key(stream_id), after
        idle_since = time.monotonic()
        pause = 0.1
        while True:
            block = self.block_ms
            if idle_timeout is not None:
                remaining = idle_timeout - (time.monotonic() - idle_since)
                if remaining <= 0:
                    return
                block = max(1, min(block, int(remaining * 1000)))
            try:
                resp: Any = await self.client.xread(
                    {key: f"{cursor + 1}-0"}, count=PAGE, block=block
                )
                batches = [entries for _key, entries in resp or [] if entries]
                claim = await self.claim(stream_id) if batches else None
            except (RedisConnectionError, RedisTimeoutError) as e:
                log.warning("chunk stream %s: read failed, will retry: %r", stream_id, e)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            pause = 0.1
            for entries in batches:
                visible = visible_after(claim, cursor, by_conversation)
                for entry_id, fields in entries:
                    for ev in _events(entry_id, fields, cursor):
                        cursor = ev.offset
                        if visible is None or ev.offset <= visible:
                            continue  # another run's
                        yield ev
                        if until_finished and ev.type == TURN_FINISH:
                            return
                idle_since = time.monotonic()
