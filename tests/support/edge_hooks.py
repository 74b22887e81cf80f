"""Hooks written as plain ``def`` that block (``TURNS_HOOKS=tests.support.edge_hooks:BlockingHooks``)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from durable_turns.hooks import TurnHooks
from durable_turns.hooks.types import TurnContext


class BlockingHooks(TurnHooks):
    def before_turn(self, ctx: TurnContext) -> Any:  # sync on purpose: runs in a thread
        seconds = float((ctx.body or {}).get("block_s", 0))
        if seconds:
            with open(os.environ["TEST_HOOK_LOG"], "a") as f:
                f.write(json.dumps({"hook": "before_turn", "blocking": seconds}) + "\n")
            time.sleep(seconds)
        return None
