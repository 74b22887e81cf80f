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
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis

from durable_turns.streams.base import (
    TURN_FINISH,
    ChunkStreamBackend,
    StreamClaim,
    StreamEvent,
    StreamNotOwned,
    decode_events,
    encode_batch,
    visible_after,
)

APPEND_LUA = """
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
return {1, first + n - 1}
"""
"""KEYS: the stream, its claim. ARGV: event count, body, MAXLEN (0 = none), TTL seconds (0 =
none), the appending owner ('' = unchecked), '1' when that owner is the conversation's run.
Returns {1, last offset}, or {0, the owner} when the append is refused (the rule of
``streams.base.claim_stream``)."""

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
        self._script: Any = None

    def key(self, stream_id: str) -> str:
        return f"{self.prefix}{stream_id}"

    def claim_key(self, stream_id: str) -> str:
        return f"{self.prefix}{stream_id}:owner"

    async def open(self) -> None:
        client = aioredis.Redis.from_url(self.url)
        await client.ping()
        self._redis = client
        self._script = client.register_script(APPEND_LUA)

    async def close(self) -> None:
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
    ) -> int:
        if not events:
            return await self.last_offset(stream_id)
        if self._script is None:
            raise RuntimeError("RedisStreamBackend is not open")
        args = [
            len(events),
            encode_batch(events),
            self.maxlen,
            self.ttl_s,
            owner or "",
            "1" if by_conversation else "0",
        ]
        keys = [self.key(stream_id), self.claim_key(stream_id)]
        ok, value = await self._script(keys=keys, args=args)
        if not ok:
            raise StreamNotOwned(stream_id, _text(value))
        return int(value)

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

    async def last_offset(self, stream_id: str) -> int:
        top: Any = await self.client.xrevrange(self.key(stream_id), max="+", min="-", count=1)
        return _ms(top[0][0]) - 1 if top else -1

    async def delete(self, stream_id: str) -> None:
        await self.client.delete(self.key(stream_id), self.claim_key(stream_id))

    async def expire(self, stream_id: str, ttl_s: float) -> None:
        for key in (self.key(stream_id), self.claim_key(stream_id)):
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
        at least as entitled owner's); what it hides is skipped for good.
        """
        key, cursor = self.key(stream_id), after
        idle_since = time.monotonic()
        while True:
            block = self.block_ms
            if idle_timeout is not None:
                remaining = idle_timeout - (time.monotonic() - idle_since)
                if remaining <= 0:
                    return
                block = max(1, min(block, int(remaining * 1000)))
            resp: Any = await self.client.xread({key: f"{cursor + 1}-0"}, count=PAGE, block=block)
            for _key, entries in resp or []:
                if not entries:
                    continue
                visible = visible_after(await self.claim(stream_id), cursor, by_conversation)
                for entry_id, fields in entries:
                    for ev in _events(entry_id, fields, cursor):
                        cursor = ev.offset
                        if visible is None or ev.offset <= visible:
                            continue  # another run's
                        yield ev
                        if until_finished and ev.type == TURN_FINISH:
                            return
                idle_since = time.monotonic()
