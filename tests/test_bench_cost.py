"""``bench.cost``'s CPU rows: a ratio is the median of each round's own ratio to its floor."""

from __future__ import annotations

import argparse
from typing import Any

from bench.cost import TARGETS, per_token
from bench.cost_run import cpu_rows


def _round(tokens: int, cpu_s: float, server_s: float = 0.0) -> dict[str, float]:
    return {"tokens": tokens, "wall_s": 10.0, "cpu_s": cpu_s, "server_s": server_s}


def _cpu(floor: list[float], engine: list[float]) -> dict[str, Any]:
    """Rounds of 1000 tokens; ``floor`` and ``engine``: each round's CPU seconds."""
    return {
        "samples": {
            "floor": [_round(1000, c) for c in floor],
            "default hooks": [_round(1000, c, 0.01) for c in engine],
            "user on_chunk": [_round(1000, c, 0.01) for c in engine],
        },
        "idle_rate": {"floor": 0.0, "default hooks": 0.0, "user on_chunk": 0.0, "server": 0.0},
    }


def test_a_round_is_compared_with_its_own_floor() -> None:
    """The machine runs at half speed from the middle of round 3 on (its engine side, not
    its floor) to the end: the rounds' ratios are 1.8× but for round 3, while the two
    medians, taken apart, would say 3.6×."""
    cpu = _cpu(floor=[0.2, 0.2, 0.2, 0.4, 0.4], engine=[0.36, 0.36, 0.72, 0.72, 0.72])
    rows = cpu_rows(cpu, per_token, TARGETS, argparse.Namespace(turns=6, tokens=1000))
    worker = next(r for r in rows if r.measure.startswith("durable-turns, default hooks"))
    assert worker.value == "720 µs"  # the median round
    assert worker.ratio is not None and abs(worker.ratio - 1.8) < 1e-9
    assert worker.status == "met"
    assert "1.80–3.60×" in worker.note and "the medians' ratio 3.60×" in worker.note


def test_per_token_subtracts_the_idle_rate_per_round() -> None:
    cpu = _cpu(floor=[0.5], engine=[0.5])
    cpu["idle_rate"]["floor"] = 0.01  # 10 ms a second over a 10 s round: 0.1 s
    assert per_token(cpu, "floor", "floor") == [400.0]
