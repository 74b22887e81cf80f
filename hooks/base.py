"""``TurnHooks``: the base class a developer subclasses to customise turns.

Override any of the ten hooks. Each may be ``async`` or plain; the engine awaits what needs
awaiting.

Durability (read this before writing a hook that does I/O):

* Hooks run inside Temporal activities, at the activity boundaries of a turn: ``before_turn``
  in *begin turn*; ``on_step_finish`` of the previous step, ``before_step`` and ``on_chunk``
  in *model step*; ``before_tool_call`` and ``after_tool_call`` in *tool call*; the last
  ``on_step_finish`` in *finish turn*; ``on_chat_error``/``classify_chat_error`` in *fail
  turn* or *model step*; ``on_chat_response`` in its own activity after the turn lock is
  released.
* Each hook call is **at-least-once**: an activity attempt that dies (worker crash, timeout)
  is retried, and its hooks run again. Make side effects idempotent (the request id, turn
  number, step number and tool call id are stable keys).
* A hook's **decision** (a TurnConfig, StepConfig or ToolCallDecision) becomes durable when
  its activity completes; from then on it is never asked again, not even on replay.
"""

from __future__ import annotations

from typing import ClassVar

from hooks.classifier import default_context_overflow_classifier
from hooks.session import Session
from hooks.types import (
    ChatErrorClassification,
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    ContextOverflowConfig,
    PrepareStepContext,
    StepConfig,
    StepContext,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    TurnConfig,
    TurnContext,
)


class TurnHooks:
    """The default hooks: accept everything, change nothing."""

    system_prompt: ClassVar[str] = "You are a helpful assistant."
    """Used when ``configure_session`` adds no context blocks."""

    context_overflow: ClassVar[ContextOverflowConfig] = ContextOverflowConfig()
    """Context-overflow recovery settings (off by default, as in Think)."""

    def configure_session(self, session: Session) -> Session:
        """Once per worker start: add context blocks, a summariser, compaction, caching."""
        return session

    async def before_turn(self, ctx: TurnContext) -> TurnConfig | None:
        """Before the first model step: inspect the assembled context, override any part."""
        return None

    async def before_step(self, ctx: PrepareStepContext) -> StepConfig | None:
        """Before every model step (step 0 included): per-step overrides."""
        return None

    async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        """Before a server tool runs: allow, allow with new input, block or substitute."""
        return None

    async def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        """After every tool outcome, blocked and substituted ones included."""

    async def on_step_finish(self, ctx: StepContext) -> None:
        """After each step, once its tool results are known."""

    async def on_chunk(self, ctx: ChunkContext) -> None:
        """Per streamed chunk: observational, high-frequency; keep it cheap."""

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        """After the assistant message is persisted and the turn lock released."""

    def on_chat_error(self, error: Exception, ctx: ChatErrorContext) -> Exception:
        """On a failed turn: return the error the caller should see."""
        return error

    def classify_chat_error(
        self, error: Exception | str, ctx: ChatErrorContext
    ) -> ChatErrorClassification | None:
        """Map a provider error to a category; "context_overflow" drives compact-and-retry."""
        return default_context_overflow_classifier(error)


def overrides(hooks: TurnHooks, name: str) -> bool:
    """Whether ``hooks`` overrides hook ``name`` (lets the engine skip no-op hot paths)."""
    return getattr(type(hooks), name) is not getattr(TurnHooks, name)
