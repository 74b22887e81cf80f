"""Hooks that kill their worker (``TURNS_HOOKS=tests.support.crash_hooks:CrashingStep``).

``before_step`` SIGKILLs the worker running the model step while the file
``TEST_CRASH_FILE`` has fewer than ``TEST_CRASH_TIMES`` lines (one is added per kill): a
step whose worker dies that many times, then runs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from durable_turns.hooks import (
    ChatErrorContext,
    ChatResponseResult,
    PrepareStepContext,
    StepContext,
    TurnContext,
    TurnHooks,
)


class CrashingStep(TurnHooks):
    def before_step(self, ctx: PrepareStepContext) -> None:  # sync: runs in a thread
        path = Path(os.environ["TEST_CRASH_FILE"])
        kills = len(path.read_text().splitlines()) if path.exists() else 0
        if kills < int(os.environ.get("TEST_CRASH_TIMES", "0")):
            with path.open("a") as f:
                f.write(f"step {ctx.step_number}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return None


class CrashingBeforeTurn(TurnHooks):
    """``before_turn`` kills its worker whenever the user's last message says "crash": a
    native library that segfaults on some input. Each call is logged to ``TEST_CRASH_FILE``."""

    def before_turn(self, ctx: TurnContext) -> None:  # sync: runs in a thread
        text = ctx.messages[-1].text if ctx.messages else ""
        with Path(os.environ["TEST_CRASH_FILE"]).open("a") as f:
            f.write(f"before_turn {text}\n")
        if "crash" in text:
            os.kill(os.getpid(), signal.SIGKILL)
        return None


class CrashingEnd(TurnHooks):
    """The last ``on_step_finish`` (in ``finish_turn``) kills its worker whenever the turn's
    request id starts with ``crash-finish``, ``on_chat_error`` (in ``fail_turn``) when it
    starts with ``crash-fail``. Each call is logged to ``TEST_CRASH_FILE``."""

    def on_step_finish(self, ctx: StepContext) -> None:  # sync: runs in a thread
        _maybe_crash("on_step_finish", ctx.request_id, "crash-finish")

    def on_chat_error(self, error: Exception, ctx: ChatErrorContext) -> Exception:
        _maybe_crash("on_chat_error", ctx.request_id, "crash-fail")
        return error

    def on_chat_response(self, result: ChatResponseResult) -> None:
        _maybe_crash("on_chat_response", result.request_id, "crash-respond")


def _maybe_crash(hook: str, request_id: str | None, crashing: str) -> None:
    with Path(os.environ["TEST_CRASH_FILE"]).open("a") as f:
        f.write(f"{hook} {request_id}\n")
    if request_id and request_id.startswith(crashing):
        os.kill(os.getpid(), signal.SIGKILL)
