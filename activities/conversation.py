"""``open_conversation_with_defaults``: where a conversation's turn numbering resumes, and
this worker's defaults for it; ``add_messages``: an ``addMessages`` request into the
transcript; ``mark_cancel``: a cancelChat's mark for the running step (``streams.cancel``);
``intake_pause``."""

from __future__ import annotations

from temporalio import activity

from durable_turns.activities.deps import ActivityDeps
from durable_turns.contract import (
    ADD_MESSAGES,
    INTAKE_PAUSE,
    MARK_CANCEL,
    OPEN_CONVERSATION_WITH_DEFAULTS,
    ConversationOpened,
)
from durable_turns.messages import Message
from durable_turns.streams.cancel import mark_cancel


class ConversationActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=OPEN_CONVERSATION_WITH_DEFAULTS)
    async def open_conversation_with_defaults(self, conversation_id: str) -> ConversationOpened:
        """The last turn number stored for a conversation (0 for a new one), and this
        worker's defaults for the conversation (its
        ``TURNS_MESSAGE_CONCURRENCY``, ``TURNS_DEBOUNCE_MS``), recorded once per
        conversation and carried over continue-as-new."""
        settings = self.deps.settings
        return ConversationOpened(
            turn_count=await self.deps.store.last_turn_number(conversation_id),
            message_concurrency=settings.message_concurrency,  # type: ignore[arg-type]
            debounce_ms=settings.debounce_ms,
        )

    @activity.defn(name=ADD_MESSAGES)
    async def add_messages(self, conversation_id: str, messages: list[Message]) -> None:
        """Append messages to the transcript outside any turn; a message id already stored
        is left as it is (a retry, or the same note sent again)."""
        await self.deps.store.add_messages(conversation_id, messages)

    @activity.defn(name=MARK_CANCEL)
    async def mark_cancel(self, conversation_id: str, request_id: str) -> bool:
        """The cancel mark that stops the request's running model step at its next look
        (a local activity of the conversation, beside its cancel of the turn); False when
        the chunk stream is off or keeps no marks."""
        if self.deps.streams is None:
            return False
        return await mark_cancel(self.deps.streams, conversation_id, request_id)


@activity.defn(name=INTAKE_PAUSE)
async def intake_pause() -> None:
    """Nothing, at once: run as a local activity, it ends the workflow's activation and the
    workflow goes on in the next one (``workflows.intake.Inbox``)."""
