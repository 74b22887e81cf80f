"""``demo:`` script files come from ``TURNS_DEMO_DIR`` only, and the demo tools are offered
to ``demo:`` models only. Real worker processes; the OpenAI SDK against the replay server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from durable_turns.messages import Message, TextDelta, user_message
from durable_turns.models import DemoProvider, ModelProvider, ModelRequest
from testkit.llm_server import LLMServer
from tests.support.harness import Harness

MAX_SCRIPT_BYTES = 1 << 20  # durable_turns.models.demo.MAX_SCRIPT_BYTES


async def test_a_script_outside_the_demo_dir_is_never_read(harness: Harness) -> None:
    harness.start_worker()
    outside = harness.tmp / "outside"
    outside.mkdir()
    secret = outside / "secret.json"
    secret.write_text(json.dumps([{"text": "SECRET-CONTENT"}]))
    for model in (f"demo:{secret}", "demo:outside/secret.json", "demo:../secret.json"):
        result = await harness.send(harness.conv("outside"), "hi", model=model)
        assert result.status == "error" and result.error is not None
        assert "SECRET-CONTENT" not in (result.text + result.error.message)
        assert "not found" in result.error.message


async def test_no_existence_oracle_on_the_worker_s_files(harness: Harness) -> None:
    harness.start_worker()
    errors = []
    for name in ("/etc/hostname", "/etc/no-such-file-here"):
        result = await harness.send(harness.conv("oracle"), "hi", model=f"demo:{name}")
        assert result.status == "error" and result.error is not None
        errors.append(result.error.message.replace(name, "NAME"))
    assert errors[0] == errors[1]


async def test_scripts_by_name_from_the_demo_dir_with_a_size_cap(harness: Harness) -> None:
    harness.start_worker()
    (harness.tmp / "greet.json").write_text(json.dumps([{"text": "hello from the folder"}]))
    for model in ("demo:greet", "demo:greet.json"):
        result = await harness.send(harness.conv("named"), "hi", model=model)
        assert result.status == "completed" and result.text == "hello from the folder"
    big = [{"text": "x" * 1000}] * (MAX_SCRIPT_BYTES // 1000 + 10)
    (harness.tmp / "big.json").write_text(json.dumps(big))
    result = await harness.send(harness.conv("big"), "hi", model="demo:big")
    assert result.status == "error" and result.error is not None
    assert f"over {MAX_SCRIPT_BYTES} bytes" in result.error.message


async def test_the_demo_tools_are_offered_to_demo_models_only(
    harness: Harness, server: LLMServer
) -> None:
    harness.start_worker(OPENAI_BASE_URL=server.openai_base_url, OPENAI_API_KEY="sk-test-key")
    server.script("openai/chat_text.sse")
    result = await harness.send(harness.conv("real"), "weather in Paris?", model="openai:gpt-x")
    assert result.status == "completed", result.error
    offered = [t["function"]["name"] for t in server.requests[0].body.get("tools", [])]
    assert "get_weather" not in offered and "add" in offered  # the worker's own tools are
    demo = await harness.send(harness.conv("demo"), "weather in Paris?", model="demo:weather")
    assert demo.status == "completed" and demo.steps == 2  # it called get_weather
    assert "Here is the forecast for Paris" in demo.text


def test_the_demo_measures_each_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The demo stands in for an instant model; the transcript's messages are the same
    # objects from step to step, so measuring them again would only cost the worker CPU.
    demo = DemoProvider()
    messages = [user_message("hello " * 40, id=str(i)) for i in range(3)]
    expected = ModelProvider.count_tokens(demo, "system", messages)
    assert demo.count_tokens("system", messages) == expected
    dumps: list[Message] = []
    dump = Message.model_dump_json

    def counted(self: Message, **kw: object) -> str:
        dumps.append(self)
        return dump(self, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Message, "model_dump_json", counted)
    assert demo.count_tokens("system", messages) == expected and dumps == []
    other = user_message("hello " * 40, id="0")  # equal to messages[0], another object
    assert demo.count_tokens("system", [other]) == ModelProvider.count_tokens(
        demo, "system", [other]
    )
    assert dumps and dumps[0] is other


async def test_the_paced_demo_streams_at_reading_pace_and_regenerates_in_other_words(
    harness: Harness,
) -> None:
    """``demo:weather-paced`` (the chat page's demo, issue 34 item 5): the reply arrives word
    by word over seconds, not at once, and a regeneration is worded differently."""
    import time

    from durable_turns.client import TurnsClient
    from durable_turns.models.demo import PACED_DELAY_MS, PACED_MODEL
    from durable_turns.streams import live_events

    harness.start_worker()
    client = TurnsClient(
        harness.client,
        harness.task_queue,
        stream_url=f"sqlite:///{harness.tmp / 'data' / 'chunks.db'}",
    )
    conv = harness.conv("paced")
    started = await client.start(conv, "What's the weather in Oslo?", model=PACED_MODEL)
    seen: list[tuple[float, int, str]] = []  # (when read, step, text), as they arrive
    async for event in client.chunks(conv, started.turn_number):
        for e in live_events([event]):
            if e.type == "chunk" and e.data["type"] == "text-delta":
                seen.append((time.monotonic(), e.step or 0, e.data["text"]))
    result = await client.result(conv, started)
    assert result.status == "completed" and result.steps == 2  # it called get_weather
    answer = [text for _, step, text in seen if step == 1]
    assert len(answer) >= 40, "the answer streams word by word"
    assert "".join(answer).strip() in result.text and "Oslo" in result.text
    assert [step for _, step, _ in seen] == sorted(step for _, step, _ in seen)
    # spread over time: read as it is written, at most ~PACED_DELAY_MS a word (a generous
    # lower bound: half the words' pauses)
    spread = seen[-1][0] - seen[0][0]
    assert spread >= len(answer) * PACED_DELAY_MS / 1000 / 2, spread

    again = await client.regenerate(conv)  # the last request's model: the paced demo
    assert again.status == "completed" and again.turn_number == started.turn_number + 1
    assert "Oslo" in again.text and again.text != result.text
    third = await client.regenerate(conv)
    assert len({result.text, again.text, third.text}) == 3, "three phrasings"
    await client.aclose()


def test_the_stock_demo_stays_instant_and_worded_the_same() -> None:
    """What the tests and benchmarks run, ``demo:weather``, has no pause and one phrasing."""
    from durable_turns.models.demo import BUILTIN_SCRIPTS

    for step in BUILTIN_SCRIPTS["weather"]:
        assert "delay_ms" not in step and isinstance(step["text"], str)


async def test_the_demo_goes_on_from_a_prefill(tmp_path: Path) -> None:
    """A ``continue_text`` the script's text starts with: only the rest streams; another
    one: the whole text (as a model going its own way)."""
    folder = tmp_path
    (folder / "count.json").write_text(json.dumps([{"text": "one two three four"}]))
    provider = DemoProvider(str(folder))
    assert provider.continues_prefill

    async def text(prefill: str) -> str:
        request = ModelRequest(model="count", messages=[user_message("go")], continue_text=prefill)
        return "".join([c.text async for c in provider.stream(request) if isinstance(c, TextDelta)])

    assert await text("") == "one two three four"
    assert await text("one two") == " three four"
    assert await text("uno dos") == "one two three four"
