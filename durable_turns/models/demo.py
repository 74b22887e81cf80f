"""The ``demo:`` provider: an offline, scripted stand-in. It is not a language model.

``demo:<name>`` plays a built-in script (``weather``, ``weather-paced``, ``parallel``, ``echo``)
or, when the
worker sets ``TURNS_DEMO_DIR``, the script file of that name in that folder (``demo:greet``
or ``demo:greet.json`` for ``$TURNS_DEMO_DIR/greet.json``). Names with a path separator, and
files over ``MAX_SCRIPT_BYTES``, are refused; nothing outside the folder is ever read, and a
missing file and a refused one get the same answer. A script is a list of steps (or
``{"steps": [...]}``, or ``{"turns": [[...], [...]]}`` for one list per user turn). Each step
may have:

* ``text``: streamed word by word (a list of texts: phrasings, see below); ``{user}``, ``{tool_result}``, ``{tool_results}`` and
  ``{city}`` are filled in, and ``{request.FIELD}`` with a field of the ``ModelRequest``
  (``{request.temperature}``, ``{request.system}``, ``{request.tools}`` (names),
  ``{request.message_count}``…; dicts and lists as JSON), so tests see what reached the model
* ``repeat``: the text is streamed this many times, space-separated (at most
  ``MAX_REPEAT``): long replies from a short script file
* ``reasoning``: streamed as reasoning deltas before the text
* ``sources``: ``[{"url": ..., "title": ...}]`` streamed as source parts
* ``raw``: a list of values streamed as raw chunks
* ``tool_calls``: ``[{"name": ..., "input": {...}, "id": optional}]``; ``"raw_args": TEXT``
  instead of ``input`` sends TEXT as the arguments as they are (``"{city: Rome"``: a call
  whose arguments are not JSON, as a provider hands it over)
* ``provider_metadata``, ``warnings``: reported with the step's finish
* ``delay_ms``: pause before each chunk (lets tests crash a worker mid-stream)
* ``stall_s`` (+ ``stall_after_chunks``): stop sending chunks for that long
* ``error``: ``{"message": ..., "status": 529, "kind": "transient", "after_chunks": 0}``
* ``attempts``: the stall or error applies only to activity attempts up to this number;
  an error with ``if_input_tokens_over: N`` applies only while the prompt is over N tokens
* ``usage``: ``{"input_tokens": ...}`` overrides the estimated usage

A request that continues a prefill (``ModelRequest.continue_text``, a step whose worker was
lost) streams only the rest of the step's text when the text starts with the prefill (a
model going on from it), else the whole text.

Which step plays is the number of model steps already taken since the last user message,
so a multi-step turn walks the script, and a continuation goes on where it stopped. A
``text`` that is a list holds phrasings of one reply: turn *n* of a conversation plays
phrasing (n - 1) mod len, so the next turn, a regeneration too, words it differently. The
turn's number is an input of the step, read from the model-step activity's workflow id
(``<conversation>/turn-<n>``); outside an activity the first phrasing plays.

``weather-paced`` is ``weather`` for a person watching the chat page (``turns demo --keep``
serves it): replies of a few sentences in three phrasings, streamed at reading pace
(:data:`PACED_DELAY_MS` before each word, about 20 words a second), so streaming, Stop, a
reload mid-reply and Regenerate can be seen. ``weather`` stays instant: the tests and
benchmarks run it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from temporalio import activity

from durable_turns.contract import CONTINUE_PROMPT
from durable_turns.messages import (
    FinishChunk,
    Message,
    RawChunk,
    ReasoningDelta,
    ReasoningEnd,
    SourcePart,
    StepStartPart,
    StreamPart,
    TextDelta,
    ToolCallChunk,
    ToolInputDelta,
    ToolInputStart,
    ToolResultPart,
    Usage,
)
from durable_turns.models.base import (
    ModelProvider,
    ModelRequest,
    ProviderError,
    parse_tool_input,
)

PACED_DELAY_MS = 50
"""``weather-paced``'s pause before each word: about 20 words a second, a reading pace."""

PACED_MODEL = "demo:weather-paced"
"""The model ``turns demo --keep`` gives its worker (and so the chat page), unless one is set."""

BUILTIN_SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "weather": [
        {
            "text": "Let me check the weather in {city}.",
            "tool_calls": [{"name": "get_weather", "input": {"city": "{city}"}}],
        },
        {"text": "Here is the forecast for {city}: {tool_result}."},
    ],
    "weather-paced": [
        {
            "text": [
                "Let me check the weather in {city} with the get_weather tool.",
                "One moment: I will ask the get_weather tool about {city}.",
                "Looking up {city} with the demo's weather tool first.",
            ],
            "tool_calls": [{"name": "get_weather", "input": {"city": "{city}"}}],
            "delay_ms": PACED_DELAY_MS,
        },
        {
            "text": [
                "Here is the forecast for {city}: {tool_result}. This reply comes from a"
                " scripted demo, not a language model, and it streams word by word at reading"
                " pace, so you can watch it arrive. Press Stop to end it mid-sentence, reload"
                " the page to see it pick up where it was, or Regenerate to get the same"
                " answer in other words.",
                "The get_weather tool says {tool_result}. That call ran as an activity of this"
                " turn's workflow, so a worker that dies now would not run it again: another"
                " worker would finish this very reply. Try a reload while the words still"
                " arrive, or Regenerate, and each new reply is worded differently.",
                "{city}, according to the demo's weather tool: {tool_result}. Every word of this"
                " reply travels from the worker through the chunk stream to this page, and the"
                " transcript keeps it once the turn ends. Open the Temporal UI to see the"
                " turn's workflow, its two model steps and its tool call.",
            ],
            "delay_ms": PACED_DELAY_MS,
        },
    ],
    "parallel": [
        {
            "text": "Checking two cities at once.",
            "tool_calls": [
                {"name": "get_weather", "input": {"city": "Paris"}},
                {"name": "get_weather", "input": {"city": "London"}},
            ],
        },
        {"text": "Both forecasts are in: {tool_results}."},
    ],
    "echo": [{"text": "You said: {user}"}],
}

_WORDS = re.compile(r"\S+\s*|\s+")
_TURN = re.compile(r"/turn-(\d+)")
_CITY = re.compile(r"\bin ([A-Z][\w-]*(?: [A-Z][\w-]*)*)")


MAX_SCRIPT_BYTES = 1 << 20
MAX_REPEAT = 100_000
"""A script file larger than this (1 MiB) is refused."""


MEASURED_MESSAGES = 4096
"""Messages whose size the demo provider remembers (least recently used out first)."""


class DemoProvider(ModelProvider):
    name = "demo"
    continues_prefill = True
    """A ``continue_text`` the step's text starts with is skipped: the rest streams."""

    def __init__(self, script_dir: str | None = None) -> None:
        folder = script_dir if script_dir is not None else os.environ.get("TURNS_DEMO_DIR")
        self.script_dir = Path(folder).resolve() if folder else None
        self._files: dict[str, tuple[float, Any]] = {}
        self._sizes: OrderedDict[int, tuple[Message, int]] = OrderedDict()

    def count_tokens(self, system: str, messages: list[Message]) -> int:
        """The base class's estimate, each message measured once: the transcript's messages
        are the very same objects from step to step (the store shares what it parsed), and
        the demo stands in for an instant model, so it should cost next to nothing."""
        return (len(system) + sum(self._size(m) for m in messages)) // 4

    def _size(self, message: Message) -> int:
        known = self._sizes.get(id(message))
        if known is not None and known[0] is message:  # held, so its id is not reused
            self._sizes.move_to_end(id(message))
            return known[1]
        size = len(message.model_dump_json())
        self._sizes[id(message)] = (message, size)
        if len(self._sizes) > MEASURED_MESSAGES:
            self._sizes.popitem(last=False)
        return size

    def script_path(self, name: str) -> Path | None:
        """The script file ``name`` stands for: in ``TURNS_DEMO_DIR``, by plain name only."""
        if self.script_dir is None or not name or name.startswith("."):
            return None
        if any(sep in name for sep in ("/", "\\", os.sep, "\x00")) or ".." in name:
            return None
        for candidate in (name, f"{name}.json"):
            path = self.script_dir / candidate
            if path.is_file() and path.resolve().parent == self.script_dir:
                return path
        return None

    def _not_found(self, name: str) -> ProviderError:
        where = (
            "a JSON file in TURNS_DEMO_DIR, by name"
            if self.script_dir is not None
            else "a script file (set TURNS_DEMO_DIR to a folder of JSON scripts)"
        )
        return ProviderError(
            f"demo script {name!r} not found: use one of {sorted(BUILTIN_SCRIPTS)} or {where}",
            kind="invalid_request",
            provider="demo",
        )

    def _load(self, name: str) -> Any:
        """Runs in a thread: the file system is never touched on the event loop."""
        path = self.script_path(name)
        if path is None:
            raise self._not_found(name)
        stat = path.stat()
        if stat.st_size > MAX_SCRIPT_BYTES:
            raise ProviderError(
                f"demo script {name!r} is over {MAX_SCRIPT_BYTES} bytes",
                kind="invalid_request",
                provider="demo",
            )
        cached = self._files.get(name)
        if cached is None or cached[0] != stat.st_mtime:
            try:
                data = json.loads(path.read_bytes()[:MAX_SCRIPT_BYTES])
            except (ValueError, UnicodeDecodeError) as e:
                raise ProviderError(
                    f"demo script {name!r} is not valid JSON: {e}",
                    kind="invalid_request",
                    provider="demo",
                ) from None
            cached = (stat.st_mtime, data)
            self._files[name] = cached
        return cached[1]

    async def _script(self, name: str) -> list[list[dict[str, Any]]]:
        """The script as one list of steps per user turn (a single list repeats)."""
        data: Any
        if name in BUILTIN_SCRIPTS:
            data = BUILTIN_SCRIPTS[name]
        else:
            data = await asyncio.to_thread(self._load, name)
        try:
            if isinstance(data, dict) and "turns" in data:
                return [list(t) for t in data["turns"]]
            steps = data["steps"] if isinstance(data, dict) else data
            if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
                raise TypeError("a script is a list of steps (JSON objects)")
            return [list(steps)]
        except (KeyError, TypeError) as e:
            raise ProviderError(
                f"demo script {name!r} is not a script: {e}",
                kind="invalid_request",
                provider="demo",
            ) from None

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        turns = await self._script(request.model)
        user_turn, position = _position(request.messages)
        steps = turns[min(user_turn, len(turns) - 1)]
        step: dict[str, Any] = (
            steps[position] if position < len(steps) else {"text": "[demo script finished]"}
        )
        fills = {**_fills(request.messages), **_request_fills(request)}
        applies = request.attempt <= int(step.get("attempts", 10**9))
        delay = float(step.get("delay_ms", 0)) / 1000
        error = step.get("error") if applies else None
        if error and "if_input_tokens_over" in error:  # an overflow only a big context hits
            if self.count_tokens(request.system, request.messages) <= error["if_input_tokens_over"]:
                error = None
        stall_s = float(step.get("stall_s", 0)) if applies else 0.0
        stall_at = int(step.get("stall_after_chunks", 0))
        error_at = int((error or {}).get("after_chunks", 0))

        chunks: list[StreamPart] = []
        if step.get("reasoning"):
            chunks += [ReasoningDelta(text=w) for w in _WORDS.findall(step["reasoning"])]
            chunks.append(ReasoningEnd())
        sources = step.get("sources", [])
        chunks += [SourcePart(id=f"src_{i}", **src) for i, src in enumerate(sources)]
        chunks += [RawChunk(value=v) for v in step.get("raw", [])]
        text = _fill(_phrasing(step.get("text", "")), fills)
        repeat = max(1, min(int(step.get("repeat", 1)), MAX_REPEAT))
        text = " ".join([text] * repeat)
        if request.continue_text and text.startswith(request.continue_text):
            text = text[len(request.continue_text) :]  # the model goes on from the prefill
        chunks += [TextDelta(text=w) for w in _WORDS.findall(text)]
        for i, call in enumerate(step.get("tool_calls", [])):
            call_id = call.get("id") or f"call_{len(request.messages)}_{position}_{i}"
            raw = call.get("raw_args")
            args = (
                str(raw)
                if raw is not None
                else json.dumps(_fill_json(call.get("input", {}), fills))
            )
            value, input_error = parse_tool_input(args)
            chunks.append(ToolInputStart(tool_call_id=call_id, tool_name=call["name"]))
            chunks.append(ToolInputDelta(tool_call_id=call_id, delta=args))
            chunks.append(
                ToolCallChunk(
                    tool_call_id=call_id,
                    tool_name=call["name"],
                    input=value,
                    input_error=input_error,
                )
            )

        for index, chunk in enumerate(chunks):
            if error and index == error_at:
                raise _error(error)
            if stall_s and index == stall_at:
                await asyncio.sleep(stall_s)
            if delay:
                await asyncio.sleep(delay)
            yield chunk
        if error and error_at >= len(chunks):
            raise _error(error)
        if stall_s and stall_at >= len(chunks):
            await asyncio.sleep(stall_s)

        usage = Usage(
            input_tokens=self.count_tokens(request.system, request.messages),
            output_tokens=len(chunks),
        )
        usage = usage.model_copy(update=step.get("usage", {}))
        usage.total_tokens = usage.input_tokens + usage.output_tokens
        has_calls = any(isinstance(c, ToolCallChunk) for c in chunks)
        yield FinishChunk(
            finish_reason="tool-calls" if has_calls else "stop",
            usage=usage,
            response={"model": f"demo:{request.model}", "scripted": True},
            provider_metadata=step.get("provider_metadata"),
            warnings=step.get("warnings", []),
        )


def _error(spec: dict[str, Any]) -> ProviderError:
    status = spec.get("status")
    kind: Any = spec.get("kind") or ("transient" if status in (408, 409, 429, 529) else "fatal")
    if status and status >= 500 and "kind" not in spec:
        kind = "transient"
    return ProviderError(
        spec.get("message", "demo error"),
        kind=kind,
        status=status,
        retry_after=spec.get("retry_after"),
        provider="demo",
    )


def _turn_number() -> int:
    """The number of the turn this step belongs to: the last ``/turn-<n>`` of the model-step
    activity's workflow id (``<conversation>/turn-<n>``); 0 outside an activity."""
    if not activity.in_activity():
        return 0
    numbers = _TURN.findall(activity.info().workflow_id or "")
    return int(numbers[-1]) if numbers else 0


def _phrasing(text: Any) -> str:
    """A step's text: itself, or of a list of phrasings the turn's (turn n: (n - 1) mod len)."""
    if isinstance(text, list):
        return str(text[(max(_turn_number(), 1) - 1) % len(text)]) if text else ""
    return str(text)


def _is_real_user(message: Message) -> bool:
    return message.role == "user" and message.text != CONTINUE_PROMPT


def _position(messages: list[Message]) -> tuple[int, int]:
    """(index of the current user turn, model steps taken since its user message)."""
    user_turns = sum(1 for m in messages if _is_real_user(m))
    steps = 0
    for message in reversed(messages):
        if _is_real_user(message):
            break
        if message.role == "assistant":
            steps += max(1, sum(isinstance(p, StepStartPart) for p in message.parts))
    return max(user_turns - 1, 0), steps


def _fills(messages: list[Message]) -> dict[str, str]:
    user = next((m.text for m in reversed(messages) if _is_real_user(m)), "")
    results = [
        p
        for m in messages
        if m.role == "assistant"
        for p in m.parts
        if isinstance(p, ToolResultPart)
    ]
    city = _CITY.search(user)

    def show(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value)

    return {
        "user": user,
        "city": city.group(1) if city else "Paris",
        "tool_result": show(results[-1].output) if results else "",
        "tool_results": "; ".join(show(r.output) for r in results[-4:]),
    }


def _request_fills(request: ModelRequest) -> dict[str, str]:
    """``request.FIELD`` → the field as text (JSON for dicts and lists), for ``{request.…}``."""
    data = request.model_dump(mode="json", exclude={"messages"})
    data["tools"] = [t["name"] for t in data["tools"]]
    data["message_count"] = len(request.messages)
    return {
        f"request.{k}": v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
        for k, v in data.items()
    }


def _fill(text: str, fills: dict[str, str]) -> str:
    for key, value in fills.items():
        text = text.replace("{" + key + "}", value)
    return text


def _fill_json(value: Any, fills: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _fill(value, fills)
    if isinstance(value, dict):
        return {k: _fill_json(v, fills) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_json(v, fills) for v in value]
    return value
