"""Regeneration in ``begin_turn``: which reply a request names, and marking it superseded.

A regenerate request (``SubmitMessages.regenerate``) names an assistant message by its stored
id, or ``"last"``: the reply the transcript ends with. The turn answers the user message
before that reply again, so the reply starts where the assistant messages after that user
message start (a reply that continuations extended is several assistant messages, one per
turn, and the whole of it is regenerated). That first message and every message stored after
it are marked superseded by the regenerating turn (``TranscriptStore.supersede_messages``,
keyed by the turn: a retried ``begin_turn`` marks once); they stay stored and leave every
later context. Anything else is a typed ``NothingToRegenerate`` that marks nothing.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from durable_turns.activities.compaction import is_compaction
from durable_turns.activities.errors import EXPECTED
from durable_turns.contract import NOTHING_TO_REGENERATE, REGENERATE_LAST, TurnRef
from durable_turns.errors import NothingToRegenerate
from durable_turns.messages import Message
from durable_turns.store import TranscriptStore


def reply_start(transcript: list[Message], target: str) -> str:
    """The id of the first message of the reply ``target`` names (see the module docstring);
    ``transcript``: the conversation's messages, superseded ones left out."""
    messages = [m for m in transcript if not is_compaction(m)]
    if target == REGENERATE_LAST:
        if not messages:
            raise NothingToRegenerate("the conversation has no messages, so no reply to regenerate")
        if messages[-1].role != "assistant":
            raise NothingToRegenerate(
                "the conversation's transcript ends with a user message, not a reply:"
                " there is no last reply to regenerate"
            )
        index = len(messages) - 1
    else:
        found = next((i for i, m in enumerate(messages) if m.id == target), None)
        if found is None:
            raise NothingToRegenerate(
                f"no message {target!r} in the conversation's transcript"
                " (unknown, or superseded already)"
            )
        if messages[found].role != "assistant":
            raise NothingToRegenerate(
                f"message {target!r} is a {messages[found].role} message:"
                " only an assistant message can be regenerated"
            )
        index = found
    while index > 0 and messages[index - 1].role == "assistant":
        index -= 1  # the reply's start: continuations extend one reply
    if not any(m.role == "user" for m in messages[:index]):
        raise NothingToRegenerate(
            f"no user message before {messages[index].id!r}: there is nothing to answer again"
        )
    return messages[index].id


async def supersede(
    store: TranscriptStore, ref: TurnRef, target: str, transcript: list[Message]
) -> list[str]:
    """Mark the reply ``target`` names superseded by the turn ``ref``; the ids marked.

    ``transcript`` is the conversation as just read. When an earlier attempt of this turn
    marked the reply already, the target is no longer in it: the store's key (the turn id)
    answers with what that attempt marked. Raises a non-retryable ``NothingToRegenerate``
    ``ApplicationError``, having marked nothing, when there is nothing to regenerate."""
    problem: NothingToRegenerate | None = None
    start: str | None = None
    try:
        start = reply_start(transcript, target)
    except NothingToRegenerate as e:
        problem = e
    marked = await store.supersede_messages(
        ref.conversation_id, start, ref.turn_id, owner=ref.owner
    )
    if not marked:
        message = str(problem) if problem else f"message {start!r} is no longer in the transcript"
        raise ApplicationError(
            f"cannot regenerate: {message}",
            type=NOTHING_TO_REGENERATE,
            non_retryable=True,
            category=EXPECTED,
        )
    return marked
