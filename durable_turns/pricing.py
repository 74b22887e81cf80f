"""What a turn costs: a small price table, and the cache share of a step's or turn's input.

Prices are US dollars per million tokens: ``input`` (uncached), ``output``, ``cache_read``
and ``cache_write`` (Anthropic's 5-minute write, 1.25x input; OpenAI charges no write).
Models are matched by the longest key that begins their name (``claude-sonnet-4`` covers
``claude-sonnet-4-5-20250929``). A model with no entry gets no estimate: tokens only.

Override or extend the table with ``TURNS_PRICES``: a JSON object, or the path of a JSON
file holding one, e.g. ``{"claude-sonnet-4": {"input": 3, "output": 15, "cache_read": 0.3,
"cache_write": 3.75}}`` (a missing ``cache_read`` / ``cache_write`` costs as ``input``).
The defaults are list prices when this was written: check them against your invoice.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from durable_turns.messages import Usage

PRICES_ENV = "TURNS_PRICES"


class Price(BaseModel):
    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None


def _p(inp: float, out: float, read: float, write: float | None = None) -> Price:
    return Price(
        input=inp, output=out, cache_read=read, cache_write=inp if write is None else write
    )


DEFAULT_PRICES: dict[str, Price] = {
    # Anthropic: reads 0.1x input, 5-minute writes 1.25x
    "claude-opus-4-6": _p(5, 25, 0.5, 6.25),
    "claude-opus-4-5": _p(5, 25, 0.5, 6.25),
    "claude-opus-4": _p(15, 75, 1.5, 18.75),
    "claude-sonnet-4": _p(3, 15, 0.3, 3.75),
    "claude-3-7-sonnet": _p(3, 15, 0.3, 3.75),
    "claude-haiku-4": _p(1, 5, 0.1, 1.25),
    "claude-3-5-haiku": _p(0.8, 4, 0.08, 1.0),
    # OpenAI: cached input at a discount, no write charge
    "gpt-5-nano": _p(0.05, 0.4, 0.005),
    "gpt-5-mini": _p(0.25, 2, 0.025),
    "gpt-5": _p(1.25, 10, 0.125),
    "gpt-4.1-nano": _p(0.1, 0.4, 0.025),
    "gpt-4.1-mini": _p(0.4, 1.6, 0.1),
    "gpt-4.1": _p(2, 8, 0.5),
    "gpt-4o-mini": _p(0.15, 0.6, 0.075),
    "gpt-4o": _p(2.5, 10, 1.25),
    "o4-mini": _p(1.1, 4.4, 0.275),
    "o3": _p(2, 8, 0.5),
}


@functools.cache
def _overrides(raw: str) -> dict[str, Price]:
    text = raw.strip()
    if not text.startswith("{"):
        text = Path(text).expanduser().read_text()
    data: dict[str, Any] = json.loads(text)
    return {name: Price.model_validate(value) for name, value in data.items()}


def price_table() -> dict[str, Price]:
    """The defaults with ``TURNS_PRICES`` over them."""
    raw = os.environ.get(PRICES_ENV, "")
    return {**DEFAULT_PRICES, **_overrides(raw)} if raw.strip() else dict(DEFAULT_PRICES)


def price_for(model: str) -> Price | None:
    """The price of a ``provider:model`` id (or a bare model name), or None if unknown."""
    name = model.split(":", 1)[1] if ":" in model else model
    name = name.rsplit("@", 1)[0]  # openai:gpt-5@responses
    table = price_table()
    matches = [key for key in table if name.startswith(key)]
    return table[max(matches, key=len)] if matches else None


def estimate_cost(model: str, usage: Usage) -> float | None:
    """US dollars for one step's usage, or None when the model has no price.

    ``usage.input_tokens`` is the whole prompt: uncached + cache writes + cache reads."""
    price = price_for(model)
    if price is None:
        return None
    read = usage.cached_input_tokens
    write = usage.cache_creation_input_tokens
    fresh = max(usage.input_tokens - read - write, 0)
    read_price = price.input if price.cache_read is None else price.cache_read
    write_price = price.input if price.cache_write is None else price.cache_write
    dollars = (
        fresh * price.input
        + read * read_price
        + write * write_price
        + usage.output_tokens * price.output
    )
    return dollars / 1_000_000


def total_cost(items: list[tuple[str, Usage]]) -> float | None:
    """The sum over (model, usage) pairs; None when no pair had a price."""
    costs = [c for model, usage in items if (c := estimate_cost(model, usage)) is not None]
    return sum(costs) if costs else None


def cached_share(usage: Usage) -> float:
    """The share of the input read from the cache (0 when there was no input)."""
    return usage.cached_input_tokens / usage.input_tokens if usage.input_tokens else 0.0


def usage_text(usage: Usage, cost: float | None = None) -> str:
    """``"41.2k in · 93% cached · 1.1k out · $0.0210"``: for summaries and results."""
    text = (
        f"{_k(usage.input_tokens)} in · {cached_share(usage):.0%} cached"
        f" · {_k(usage.output_tokens)} out"
    )
    return text + (f" · ${cost:.4f}" if cost is not None else "")


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}k" if tokens >= 1000 else str(tokens)


def turn_accounting(steps: list[tuple[str, Usage]]) -> dict[str, Any]:
    """``TurnResult``'s ``usage``, ``cost_usd`` and ``usage_text`` from its steps."""
    usage = sum((u for _, u in steps), Usage())
    cost = total_cost(steps)
    return {"usage": usage, "cost_usd": cost, "usage_text": usage_text(usage, cost)}
