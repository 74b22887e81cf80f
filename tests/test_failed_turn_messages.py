"""What later turns send of failed turns' user messages (issue 29, item 5): keep, drop, fold."""

from __future__ import annotations

from durable_turns.activities.context import FOLD_NOTE, failed_turn_messages
from durable_turns.messages import Message, TextPart
from durable_turns.store import TurnRecord
from tests.support.harness import Harness
from tests.support.hooks import calls, start_worker


def msg(role: str, id: str, text: str) -> Message:
    return Message(id=id, role=role, parts=[TextPart(text=text)])  # type: ignore[arg-type]


TURN = TurnRecord(turn_id="c/turn-5", conversation_id="c", turn_number=5, request_id="r5")
TRANSCRIPT = [
    msg("user", "r1/0", "first"),
    msg("assistant", "c/turn-1/assistant", "answer"),
    msg("user", "r2/0", "two"),  # r2 and r3 failed before any reply
    msg("user", "r3/0", "three"),
    msg("user", "r4/0", "four, in two"),  # r4 was answered: both its messages stay
    msg("user", "r4/1", "messages"),
    msg("assistant", "c/turn-4/assistant", "answer"),
    msg("user", "r5/0", "now"),  # this turn's own
]


def test_keep_is_the_default_and_sends_everything() -> None:
    assert failed_turn_messages(TRANSCRIPT, TURN, None) == TRANSCRIPT
    assert failed_turn_messages(TRANSCRIPT, TURN, "keep") == TRANSCRIPT


def test_drop_leaves_unanswered_messages_out() -> None:
    kept = failed_turn_messages(TRANSCRIPT, TURN, "drop")
    assert [m.id for m in kept] == [
        "r1/0",
        "c/turn-1/assistant",
        "r4/0",
        "r4/1",
        "c/turn-4/assistant",
        "r5/0",
    ]


def test_fold_sends_each_run_as_one_message_with_a_note() -> None:
    folded = failed_turn_messages(TRANSCRIPT, TURN, "fold")
    assert [m.id for m in folded][2:4] == ["r2/0/folded", "r4/0"]
    assert folded[2].role == "user" and folded[2].text == f"{FOLD_NOTE}\n\ntwo\n\nthree"
    assert len(folded) == len(TRANSCRIPT) - 1


def test_a_last_unanswered_message_before_the_turn_counts_too() -> None:
    transcript = [msg("user", "r4/0", "lost"), msg("user", "r5/0", "now")]
    assert [m.id for m in failed_turn_messages(transcript, TURN, "drop")] == ["r5/0"]


async def test_a_later_turn_sends_failed_turns_messages_as_configured(harness: Harness) -> None:
    start_worker(harness)
    conversation = harness.conv("failed-turns")
    for text in ("one", "two"):
        failed = await harness.send(
            conversation, text, model="demo:echo", body={"raise_in": "before_turn"}
        )
        assert failed.status == "error"

    async def sent(text: str, policy: str | None) -> tuple[int, str]:
        body = {"turn_config": {"failed_turn_messages": policy}} if policy else {}
        result = await harness.send(conversation, text, model="demo:echo", body=body)
        assert result.status == "completed"
        step = calls(harness, "before_step")[-1]  # what the model step sends
        return step["message_count"], step["first_text"]

    assert await sent("three", "drop") == (1, "three")  # only this turn's message
    # "one" and "two" still got no reply: folded into one message, then the turns since
    assert await sent("four", "fold") == (4, f"{FOLD_NOTE}\n\none\n\ntwo")
    assert await sent("five", None) == (7, "one")  # the default keeps them all, as before
    stored = await (await harness.store()).messages(conversation)
    assert [m.text for m in stored if m.role == "user"] == ["one", "two", "three", "four", "five"]
