"""``async def`` user code that blocks (``time.sleep``) in each place user code runs.

``TURNS_HOOKS=tests.support.async_blocking:AsyncBlockingHooks`` (importing it
registers the ``test-block`` transform). A turn whose body says
``{"block": "before_turn"}`` blocks in ``before_turn``; ``{"transform": true}`` runs the
``test-block`` transform, which blocks on a text delta ``BLOCK``; ``on_chunk`` blocks on a
text delta ``BLOCK`` when the body asks ``{"block": "on_chunk"}``. Each blocks for
``TEST_BLOCK_S`` seconds and writes ``{"hook": "blocking", "in": ...}`` to ``TEST_HOOK_LOG``
first. The async tool that blocks is ``block_async`` (``tests.support.edge_tools``).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from durable_turns.hooks import TurnHooks
from durable_turns.hooks.types import ChunkContext, TurnContext
from durable_turns.messages import StreamPart, TextDelta
from durable_turns.transforms import stream_transform

_on_chunk_blocks: set[str] = set()
"""Conversations whose ``on_chunk`` is to block (their before_turn said so)."""


def block(where: str) -> None:
    with open(os.environ["TEST_HOOK_LOG"], "a") as f:
        f.write(json.dumps({"hook": "blocking", "in": where, "pid": os.getpid()}) + "\n")
    time.sleep(float(os.environ.get("TEST_BLOCK_S", "15")))


class AsyncBlockingHooks(TurnHooks):
    async def before_turn(self, ctx: TurnContext) -> Any:
        body = ctx.body or {}
        if body.get("block") == "before_turn":
            block("before_turn")
        if body.get("block") == "on_chunk":
            _on_chunk_blocks.add(ctx.conversation_id)
        if body.get("transform"):
            return {"experimental_transform": ["test-block"]}
        return None

    async def on_chunk(self, ctx: ChunkContext) -> None:
        chunk = ctx.chunk
        if isinstance(chunk, TextDelta) and "BLOCK" in chunk.text:
            if ctx.conversation_id in _on_chunk_blocks:
                block("on_chunk")


@stream_transform("test-block")
def blocking_transform(part: StreamPart) -> StreamPart:
    if isinstance(part, TextDelta) and "BLOCK" in part.text:
        block("transform")
    return part
