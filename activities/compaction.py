"""Context compaction: fold older messages into a summary, never deleting the transcript.

A compaction is stored as one more transcript message (role ``system``) whose metadata
names the last message it folds (``compaction.through``). The context sent to a model is
the newest summary followed by the messages after its ``through``; the full transcript
stays readable in the store. The summariser is the session's ``on_compaction`` function,
or by default a model call to the turn's model.
"""

from __future__ import annotations

from durable_turns.contract import CompactResult
from durable_turns.hooks.session import Session
from durable_turns.messages import Message, TextDelta, TextPart, user_message
from durable_turns.models import ModelRegistry, ModelRequest

SUMMARY_PROMPT = (
    "Summarise the conversation below for your own later use: keep every fact, decision,"
    " open question and tool result that may matter; drop pleasantries. Answer with the"
    " summary only."
)
KEEP_RECENT = 2
"""Messages kept verbatim after the summary (at least the user's latest message)."""


def is_compaction(message: Message) -> bool:
    return "compaction" in message.metadata


def apply_compaction(messages: list[Message]) -> list[Message]:
    """The context after the newest compaction: its summary, then what it did not fold."""
    newest = max((i for i, m in enumerate(messages) if is_compaction(m)), default=None)
    if newest is None:
        return messages
    summary = messages[newest]
    through = summary.metadata["compaction"].get("through")
    start = next((i + 1 for i, m in enumerate(messages) if m.id == through), 0)
    return [summary, *(m for m in messages[start:] if not is_compaction(m))]


async def summarise(
    session: Session, models: ModelRegistry, model: str, head: list[Message]
) -> str:
    """The session's summariser, or the turn's model asked for a summary."""
    if session.summariser is not None:
        return await session.summarise(head)
    provider, name = models.resolve(model)
    transcript = "\n\n".join(f"{m.role}: {m.text}" for m in head if m.text)
    request = ModelRequest(
        model=name, system=SUMMARY_PROMPT, messages=[user_message(transcript, id="compaction")]
    )
    parts = [c.text async for c in provider.stream(request) if isinstance(c, TextDelta)]
    return "".join(parts).strip()


async def compact(
    context: list[Message],
    *,
    session: Session,
    models: ModelRegistry,
    model: str,
    summary_id: str,
    reason: str,
) -> tuple[Message | None, CompactResult]:
    """A summary message folding all but the last messages of ``context``, if it shortens it."""
    count = session.count_tokens
    before = count(context)
    if len(context) <= KEEP_RECENT:
        return None, CompactResult(
            shortened=False, tokens_before=before, tokens_after=before, reason=reason
        )
    head, tail = context[:-KEEP_RECENT], context[-KEEP_RECENT:]
    text = await summarise(session, models, model, head)
    summary = Message(
        id=summary_id,
        role="system",
        parts=[TextPart(text=f"Summary of the earlier conversation:\n{text}")],
        metadata={
            "compaction": {"through": head[-1].id, "reason": reason, "tokens_before": before}
        },
    )
    after = count([summary, *tail])
    result = CompactResult(
        shortened=bool(text) and after < before,
        tokens_before=before,
        tokens_after=after,
        folded=len(head),
        reason=reason,
    )
    summary.metadata["compaction"]["tokens_after"] = after
    return (summary if result.shortened else None), result
