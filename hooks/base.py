"""``TurnHooks``: the base class a developer subclasses to customise turns.

Override any of the twelve hooks. Each may be ``async def`` or plain ``def``; the engine awaits
what needs awaiting. Point a worker at the subclass with ``--hooks module:Class`` (env
``TURNS_HOOKS``).

Order, for a turn whose model calls one tool per step::

    configure_session                       once per worker start
    before_turn                             begin turn
      before_step(0) → on_chunk… → [repair_tool_call] → before_tool_call → (tool runs) → on_chunk(tool-result)
        → after_tool_call → on_step_finish(0)
      before_step(1) → on_chunk… → on_step_finish(1)
    on_chat_response                        after the message is stored and the lock released

Parallel tool calls of one step run as parallel activities: each call's
``before_tool_call → tool → after_tool_call`` is in order, the calls interleave freely.

Durability (read this before writing a hook that does I/O):

* Hooks run inside Temporal activities, at the activity boundaries of a turn:
  ``before_turn`` in *begin turn*; ``on_step_finish`` of the previous step, ``before_step``,
  ``on_chunk`` (model chunks) and ``repair_tool_call`` in *model step*; ``before_tool_call``, ``on_chunk``
  (tool results, preliminary ones included) and ``after_tool_call`` in *tool call*; the
  last ``on_step_finish`` in *finish turn*; ``classify_chat_error`` in *model step*;
  ``on_chat_recovery`` at the start of the *model step* or *tool call* attempt it is about;
  ``on_chat_error`` in *fail turn*; ``on_chat_response`` in its own activity after the turn
  lock is released. A hook may therefore run on any worker: keep state in a store, not in
  ``self``.
* Each hook call is **at-least-once**: an activity attempt that dies (worker crash, timeout)
  is retried, and its hooks run again. Make side effects idempotent (the request id, turn
  number, step number and tool call id are stable keys).
* A hook's **decision** (a TurnConfig, StepConfig, RepairedToolCall or ToolCallDecision) becomes durable when
  its activity completes; from then on it is never asked again, not even on replay or on
  another worker after a crash. A tool whose result is recorded never runs again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, ClassVar

from durable_turns.hooks.classifier import default_context_overflow_classifier
from durable_turns.hooks.session import Session
from durable_turns.hooks.types import (
    ChatErrorClassification,
    ChatErrorContext,
    ChatRecoveryContext,
    ChatResponseResult,
    ChunkContext,
    ContextOverflowConfig,
    PrepareStepContext,
    RecoveryDecision,
    RepairedToolCall,
    StepConfig,
    StepContext,
    ToolCallContext,
    ToolCallDecision,
    ToolCallRepairContext,
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

    extensions: ClassVar[Sequence[Any]] = ()
    """Extension objects (see ``hooks.extensions``): they observe the turn through
    JSON-safe snapshots after the hooks of this class, in this order."""

    def configure_session(self, session: Session) -> Session | Awaitable[Session]:
        """Once per worker start: context blocks, a summariser, compaction, prompt caching.

        ``session.with_context(name, provider)`` blocks, in order, build the system prompt
        (``system_prompt`` is used when there are none); ``with_cached_prompt()`` asks the
        provider to cache it. Return the session.
        """
        return session

    async def before_turn(self, ctx: TurnContext) -> TurnConfig | None:
        """Before the first model step: inspect the assembled context, override any part.

        Return a ``TurnConfig`` with only the fields to change, or None. Runs once per turn,
        on every entry path: submitted
        messages, a directly started ``TurnWorkflow``, ``continueLastTurn``
        (``ctx.continuation`` is True). Raising fails the turn through ``on_chat_error``
        with stage ``"turn"``; the user's messages are kept.
        """
        return None

    async def before_step(self, ctx: PrepareStepContext) -> StepConfig | None:
        """Before every model step (step 0 included): per-step overrides.

        ``ctx.steps`` are the finished steps, ``ctx.messages`` what the step will send.
        Return a ``StepConfig`` (model, tool_choice, active_tools, system, messages,
        experimental_context, provider_options) or None. Raising fails the turn.
        """
        return None

    async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        """Before a server tool runs: allow, allow with new input, block or substitute.

        Not called for client tools, unknown tools, or input that fails validation (those
        are tool errors already). Raising becomes a tool error the model sees, and
        ``after_tool_call`` reports ``success=False``.
        """
        return None

    async def repair_tool_call(self, ctx: ToolCallRepairContext) -> RepairedToolCall | None:
        """When a call of the model does not validate (``ctx.problem``: an unknown tool,
        arguments that are not JSON, or input that fails the tool's model): return the call
        to make instead, or None to send the validation error back to the model as today.

        Runs in *model step*, once per failing call, after the stream and before the step
        is stored: the stored step (and so the transcript, and what the model sees next
        step) has the repaired call, and a retried or replayed step never asks again. The
        repaired call is validated like any other; one that still fails is a tool error the
        model sees, never repaired twice. Raising is a tool error too
        (``repair_tool_call raised …``, outcome ``"hook_error"``); the tool does not run.
        Think's ``TurnConfig.repairToolCall`` (the AI SDK's ``experimental_repairToolCall``).
        """
        return None

    async def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        """After every tool outcome, blocked and substituted ones included.

        ``ctx.input`` is what the model emitted; ``success``/``output``/``error`` are what
        the model sees. A raise is logged and ignored (the result stands).
        """

    async def on_step_finish(self, ctx: StepContext) -> None:
        """After each step, once its tool results are known: text, reasoning, tool calls
        and results, finish reason, usage, provider metadata, warnings, response."""

    async def on_chunk(self, ctx: ChunkContext) -> None:
        """Per streamed chunk: observational, high-frequency; keep it cheap.

        Only dispatched when overridden. Model chunks come from the model-step activity;
        tool results (``tool-result``, ``preliminary=True`` for a streaming tool's
        intermediate values) from the tool-call activity. A raise is logged and ignored.

        A retried step streams again from its start: ``ctx.attempt`` (the activity attempt,
        1 first) is then higher, the hooks' form of the live stream's ``reset``; drop what
        you accumulated from the step's earlier attempts.
        """

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        """After the assistant message is persisted and the turn lock released.

        Fires for every turn that ran, on every entry path: ``result.status`` is
        ``"completed"``, ``"error"`` (``result.error`` is what the caller saw) or
        ``"aborted"``. It is safe to submit a follow-up turn from here (signal
        ``submitMessages`` on the conversation, e.g. with ``TurnsClient.submit``): the lock
        is free, and it runs as the next turn. A raise is logged and ignored.
        """

    def on_chat_error(self, error: Exception, ctx: ChatErrorContext) -> Exception:
        """On a failed turn: return the error the caller should see (its message becomes
        ``TurnResult.error.message``). Sees errors before streaming (``before_turn``
        raising: stage ``"turn"``) and from the model (stage ``"stream"``); the partial
        assistant message is stored before this runs."""
        return error

    async def on_chat_recovery(self, ctx: ChatRecoveryContext) -> RecoveryDecision | None:
        """A model step or a tool call runs again because its last attempt was lost (its
        worker died, shut down or lost the store, or the model stream stalled): return
        ``"continue"`` (or None, the default) to run the new attempt, or ``"stop"`` to end
        the turn ``aborted`` with what it has (Think's ``onChatRecovery``).

        Runs at the start of the new attempt, on whichever worker has it, before anything of
        the step or call runs again; the live stream has a ``recovering`` event by then.
        ``ctx`` says what is known: the stage, step, attempt, why the attempt before was
        lost, and what it streamed (``partial_text``, discarded unless you stop: then it is
        kept as the aborted reply). The answer is the attempt's result in history: never
        asked again on replay; a worker that dies after asking asks again at the next
        attempt. Not asked for a step or call whose result an earlier attempt stored
        (nothing runs again), nor past the crash budget (``WorkerCrashLoop``). A raise, or
        a return that is neither, is logged and counts as ``"continue"``.
        """
        return None

    def classify_chat_error(
        self, error: Exception | str, ctx: ChatErrorContext
    ) -> ChatErrorClassification | None:
        """Map a provider error to a category; ``"context_overflow"`` drives recovery.

        Consulted only when ``context_overflow.reactive`` is on, for non-transient
        provider errors. The default is ``default_context_overflow_classifier``.
        """
        return default_context_overflow_classifier(error)


def overrides(hooks: TurnHooks, name: str) -> bool:
    """Whether ``hooks`` overrides hook ``name`` (lets the engine skip no-op hot paths)."""
    return getattr(type(hooks), name) is not getattr(TurnHooks, name)
