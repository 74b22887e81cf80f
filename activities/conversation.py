"""``open_conversation``: where a conversation's turn numbering resumes; ``intake_pause``."""

from __future__ import annotations

from temporalio import activity

from durable_turns.activities.deps import ActivityDeps
from durable_turns.contract import INTAKE_PAUSE, OPEN_CONVERSATION


class ConversationActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=OPEN_CONVERSATION)
    async def open_conversation(self, conversation_id: str) -> int:
        """The last turn number stored for a conversation (0 for a new one)."""
        return await self.deps.store.last_turn_number(conversation_id)


@activity.defn(name=INTAKE_PAUSE)
async def intake_pause() -> None:
    """Nothing, at once: run as a local activity, it ends the workflow's activation and the
    workflow goes on in the next one (``workflows.intake.Inbox``)."""
