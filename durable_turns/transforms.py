"""Named stream transforms: ``TurnConfig.experimental_transform`` picks them by name.

A transform is a function of one stream part that returns the part (changed or not), a
list of parts (to split or add), or None (to drop it). The transforms a turn names are
applied in order to each model step's provider stream, before the step's output is
accumulated, stored and shown to ``on_chunk``: what they produce is what the turn says.

Register one in a module the worker imports (``--transforms module``, or any module of
tools or hooks)::

    from durable_turns.transforms import stream_transform

    @stream_transform("no-swearing")
    def no_swearing(part):
        if part.type == "text-delta":
            return part.model_copy(update={"text": censor(part.text)})
        return part

A transform sees one part at a time: text split across deltas is not rejoined. A step's
transforms run on a user loop's thread kept for the step (the built-ins inline), so one
that blocks delays only its own turn; each part then costs a hop to that thread and back
(docs/operations.md). Every
worker of a task queue must register the same transforms (a turn naming an unknown one
fails at ``begin_turn`` with a clear error).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from durable_turns.errors import UnknownTransform
from durable_turns.messages import ReasoningDelta, StreamPart, TextDelta

Transform = Callable[[StreamPart], StreamPart | list[StreamPart] | None]
Apply = Callable[[StreamPart, Sequence[Transform]], list[StreamPart]]
Runner = Callable[[Apply, StreamPart, Sequence[Transform]], Awaitable[list[StreamPart]]]
"""How ``apply_transforms`` calls them: e.g. on a thread of its own (the engine's user loop)."""

_REGISTRY: dict[str, Transform] = {}


def register_transform(name: str, fn: Transform) -> Transform:
    if name in _REGISTRY and _REGISTRY[name] is not fn:
        raise ValueError(f"two stream transforms are named {name!r}")
    _REGISTRY[name] = fn
    return fn


def stream_transform(name: str) -> Callable[[Transform], Transform]:
    """Decorator: register a transform under ``name``."""
    return lambda fn: register_transform(name, fn)


def transform_names() -> list[str]:
    return sorted(_REGISTRY)


def resolve_transforms(names: Sequence[str]) -> list[Transform]:
    unknown = [n for n in names if n not in _REGISTRY]
    if unknown:
        raise UnknownTransform(
            f"unknown stream transform(s) {unknown}; this worker has {transform_names()}"
        )
    return [_REGISTRY[n] for n in names]


def load_transforms(module_name: str) -> None:
    """Import a module whose ``@stream_transform`` functions register themselves."""
    before = set(_REGISTRY)
    importlib.import_module(module_name)
    if set(_REGISTRY) == before:
        raise ValueError(f"module {module_name!r} registers no stream transforms")


async def apply_transforms(
    stream: AsyncIterator[StreamPart],
    transforms: Sequence[Transform],
    run: Runner | None = None,
) -> AsyncIterator[StreamPart]:
    """The stream with each part passed through the transforms, in order (each part's
    transforms called by ``run``, or inline)."""
    try:
        async for part in stream:
            outs = _apply(part, transforms) if run is None else await run(_apply, part, transforms)
            for out in outs:
                yield out
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


def _apply(part: StreamPart, transforms: Sequence[Transform]) -> list[StreamPart]:
    parts = [part]
    for fn in transforms:
        next_parts: list[StreamPart] = []
        for p in parts:
            out = fn(p)
            if out is None:
                continue
            next_parts.extend(out if isinstance(out, list) else [out])
        parts = next_parts
    return parts


# --- built-ins ---------------------------------------------------------------------------------


def is_builtin(fn: Transform) -> bool:
    """One of the transforms below: cheap, never blocking, run inline."""
    return fn in _BUILTINS


_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


@stream_transform("uppercase")
def uppercase(part: StreamPart) -> StreamPart:
    """Text in capitals (a demonstration transform)."""
    if isinstance(part, TextDelta):
        return part.model_copy(update={"text": part.text.upper()})
    return part


@stream_transform("redact-emails")
def redact_emails(part: StreamPart) -> StreamPart:
    """E-mail addresses in text and reasoning become ``[email]`` (per chunk)."""
    if isinstance(part, TextDelta | ReasoningDelta) and "@" in part.text:
        return part.model_copy(update={"text": _EMAIL.sub("[email]", part.text)})
    return part


_BUILTINS = frozenset({uppercase, redact_emails})
