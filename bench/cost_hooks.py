"""``bench.cost``'s user hook: an ``on_chunk`` that counts the chunks it sees (the least a
user's ``on_chunk`` does), loaded by a worker as ``TURNS_HOOKS=bench.cost_hooks:CountChunks``."""

from __future__ import annotations

from durable_turns.hooks import ChunkContext, TurnHooks


class CountChunks(TurnHooks):
    """Counts every chunk of every turn on this worker."""

    chunks = 0

    async def on_chunk(self, ctx: ChunkContext) -> None:
        type(self).chunks += 1
