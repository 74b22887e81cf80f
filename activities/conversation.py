"""``open_conversation``: where a conversation's turn numbering resumes."""

from __future__ import annotations

from temporalio import activity

from durable_turns.activities.deps import ActivityDeps
from durable_turns.contract import OPEN_CONVERSATION


class ConversationActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=OPEN_CONVERSATION)
    async def open_conversation(self, conversation_id: str) -> int:
        """The last turn number stored for a conversation (0 for a new one)."""
        return await self.deps.store.last_turn_number(conversation_id)
