"""``bench.ttft``'s peer rows and its "lowest of all" targets, from made-up samples."""

from __future__ import annotations

from bench import ttft


def samples(**medians: float) -> dict[str, list[float]]:
    keys = ["direct", "direct_openai", "warm", "first", "streams"]
    keys += [f"{n}/{c}/{k}" for n, c, k in ttft.PEER_PATHS]
    return {k: [medians[k]] if k in medians else [] for k in keys}


def test_lowest_of_all_judges_added_ms_over_each_wire_formats_direct_call() -> None:
    peers = {f"{n}/{c}/{k}": 0.060 for n, c, k in ttft.PEER_PATHS}
    peers["openai-agents/tuned/first"] = 0.045  # +40 ms over OpenAI's direct 5 ms
    s = samples(direct=0.010, direct_openai=0.005, warm=0.040, first=0.060, streams=0.090, **peers)
    warm, first = ttft.lowest_rows(s)
    assert (warm.measure, warm.status) == ("durable-turns lowest of all, warm", "met")
    assert first.status == "MISSED"  # +50 ms against openai-agents' +40 ms
    assert "openai-agents, tuned +40.0 ms" in first.reference


def test_peers_not_measured_say_why() -> None:
    s = samples(direct=0.010, direct_openai=0.005, warm=0.040, first=0.060, streams=0.090)
    rows = ttft.peer_rows(s, dict.fromkeys(ttft.PEER_LABELS, "no venv"))
    assert [r.value for r in rows[1:]] == ["—", "—"]
    assert all(r.note == "not measured: no venv" for r in rows[1:])
    assert "the peers not measured" in ttft.lowest_rows(s)[0].note
