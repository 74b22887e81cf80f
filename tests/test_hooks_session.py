"""``configure_session``: context blocks build the system prompt; caching; compaction."""

from __future__ import annotations

from durable_turns.hooks import Session, approximate_token_count
from durable_turns.messages import Message, user_message
from tests.support.harness import Harness
from tests.support.hooks import calls, start_worker

BLOCKS_PROMPT = "## soul\nYou are a test agent.\n\n## memory (learned facts)\nThe user likes tea."


async def test_context_blocks_build_the_system_prompt(harness: Harness) -> None:
    start_worker(harness, TEST_SESSION="blocks")
    script = harness.script([{"text": "{request.cached_prompt}|{request.system}"}])
    result = await harness.send(harness.conv("blocks"), "hi", model=script)
    cached, system = result.text.split("|", 1)
    assert cached == "true" and system == BLOCKS_PROMPT
    assert calls(harness, "before_turn")[0]["system"] == BLOCKS_PROMPT
    overridden = await harness.send(
        harness.conv("blocks-2"), "hi", model=script, body={"turn_config": {"system": "Mine."}}
    )
    assert overridden.text == "true|Mine."
    assert len(calls(harness, "configure_session")) == 1


async def test_without_blocks_the_hooks_system_prompt_is_used() -> None:
    assert await Session().system_prompt("default prompt") == "default prompt"
    session = Session().with_context("a", lambda: "sync block").with_context("b", "", "empty")
    assert await session.system_prompt("unused") == "## a\nsync block\n\n## b (empty)"
    assert (
        await Session().with_context("c", "x" * 100, max_tokens=2).system_prompt("")
        == "## c\nxxxxxxxx"
    )


def messages(n: int) -> list[Message]:
    return [user_message(f"message {i} " + "w" * 100, id=f"m{i}") for i in range(n)]


async def test_your_counter_and_summariser_get_copies_of_the_messages() -> None:
    # the worker shares the messages it read from the store: code you hand the session
    # gets its own copies, so changing one in place changes nothing else
    seen: list[Message] = []

    def counter(ms: list[Message]) -> int:
        seen.extend(ms)
        ms[0].parts.clear()
        return 0

    def summarise(old: list[Message]) -> str:
        seen.extend(old)
        old[0].parts.clear()
        return "they talked"

    shared = messages(6)
    session = Session().on_compaction(summarise).compact_after(1, token_counter=counter)
    assert not session.needs_compaction(shared)
    assert await session.compact(shared) is not None
    assert seen and not any(s is m for s in seen for m in shared)
    assert shared == messages(6)
    # the built-in counter only reads them: no copies to make
    assert Session().count_tokens(shared) == approximate_token_count(shared)


async def test_compaction_settings() -> None:
    folded: list[int] = []

    async def summarise(old: list[Message]) -> str:
        folded.append(len(old))
        return "they talked"

    session = (
        Session()
        .on_compaction(summarise)
        .compact_after(1000, token_counter=lambda ms: 100 * len(ms))
        .with_cached_prompt()
    )
    assert session.cached_prompt and session.compact_after_tokens == 1000
    assert not session.needs_compaction(messages(10)) and session.needs_compaction(messages(11))
    compacted = await session.compact(messages(11))
    assert compacted is not None and folded == [7]
    assert [m.id for m in compacted] == ["summary-through-m6", "m7", "m8", "m9", "m10"]
    assert compacted[0].role == "system" and "they talked" in compacted[0].text
    assert await session.compact(messages(4)) is None  # nothing to fold
    assert await Session().compact(messages(11)) is None  # no summariser
    default = Session().compact_after(10)
    assert default.token_counter is approximate_token_count and default.needs_compaction(
        messages(2)
    )


async def test_a_summariser_that_gives_nothing_folds_nothing() -> None:
    # one place runs your summariser for both the session's compact and the engine's
    # compaction: an async one that returns None is no summary, not the text "None"
    async def nothing(old: list[Message]) -> None:
        return None

    session = Session().on_compaction(nothing)  # type: ignore[arg-type]
    assert await session.summarise(messages(6)) == ""
    assert await session.compact(messages(6)) is None
    assert await Session().summarise(messages(6)) == ""  # no summariser
