"""Everything that does I/O in a turn: one module per activity, over the shared ``ActivityDeps``.

Each activity takes ids and small deltas, loads what it needs from the store, calls the
hooks of its boundary (through ``Lifecycle``) and writes idempotently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durable_turns.activities.agent_relay import AgentRelayActivities
from durable_turns.activities.begin import BeginActivities
from durable_turns.activities.compact import CompactActivities
from durable_turns.activities.conversation import ConversationActivities, intake_pause
from durable_turns.activities.deps import ActivityDeps
from durable_turns.activities.finish import FinishActivities
from durable_turns.activities.last_step import LastStepActivities
from durable_turns.activities.model_step import ModelStepActivities
from durable_turns.activities.tool_call import ToolCallActivities

__all__ = ["ActivityDeps", "all_activities"]


def all_activities(deps: ActivityDeps) -> list[Callable[..., Any]]:
    """Every activity of a turn, bound to one worker's dependencies."""
    finish = FinishActivities(deps)
    conversation = ConversationActivities(deps)
    return [
        conversation.open_conversation_with_defaults,
        conversation.add_messages,
        conversation.mark_cancel,
        intake_pause,
        BeginActivities(deps).begin_turn,
        LastStepActivities(ModelStepActivities(deps), finish).model_step,
        ToolCallActivities(deps).tool_call,
        AgentRelayActivities(deps).relay_agent,
        CompactActivities(deps).compact,
        finish.finish_turn,
        finish.fail_turn,
        finish.chat_response,
    ]
