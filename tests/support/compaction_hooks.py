"""Hooks with context-overflow recovery on and a summariser that says what it folded.

``TEST_OVERFLOW=reactive`` (default), ``proactive:<max input tokens>`` or
``compact_after:<tokens>`` choose the mode; every compaction is logged to TEST_HOOK_LOG.
``TEST_SLOW_SUMMARY=<seconds>`` makes the summariser slow, so a test can kill the worker
while it compacts.
"""

from __future__ import annotations

import asyncio
import json
import os

from durable_turns.hooks import ContextOverflowConfig, Session, TurnHooks
from durable_turns.messages import Message

MODE, _, VALUE = os.environ.get("TEST_OVERFLOW", "reactive").partition(":")


def _log(folded: int) -> None:
    path = os.environ.get("TEST_HOOK_LOG")
    if path:
        with open(path, "a") as f:
            entry = {"hook": "on_compaction", "folded": folded, "pid": os.getpid()}
            f.write(json.dumps(entry) + "\n")


async def summarise(messages: list[Message]) -> str:
    _log(len(messages))
    await asyncio.sleep(float(os.environ.get("TEST_SLOW_SUMMARY", "0")))
    return f"(summary of {len(messages)} earlier messages)"


class CompactingHooks(TurnHooks):
    context_overflow = ContextOverflowConfig(
        reactive=MODE == "reactive",
        max_retries=1,
        max_input_tokens=int(VALUE) if MODE == "proactive" else None,
    )

    def configure_session(self, session: Session) -> Session:
        session.on_compaction(summarise)
        if MODE == "compact_after":
            session.compact_after(int(VALUE))
        return session
