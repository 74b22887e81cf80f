"""The worker's event loop (``durable_turns.eventloop``): while busy, one wait per interval."""

from __future__ import annotations

import asyncio
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from durable_turns.config import Settings
from durable_turns.eventloop import (
    BUSY_EVENTS_PER_INTERVAL,
    WINDOW_INTERVALS,
    CoalescingSelector,
    loop_factory,
)

INTERVAL_S = 0.2
Pair = tuple[CoalescingSelector, socket.socket, socket.socket]


@pytest.fixture
def make_pair() -> Iterator[Callable[[float], Pair]]:
    """Makes a selector (of that interval) watching a socket pair's reader; all are closed
    when the test ends."""
    made: list[Pair] = []

    def make(interval_s: float) -> Pair:
        selector = CoalescingSelector(interval_s)
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        selector.register(reader, selectors.EVENT_READ)
        made.append((selector, reader, writer))
        return made[-1]

    yield make
    for selector, reader, writer in made:
        selector.close()
        reader.close()
        writer.close()


@pytest.fixture
def pair(make_pair: Callable[[float], Pair]) -> Pair:
    """A selector that found its loop busy."""
    selector, reader, writer = make_pair(INTERVAL_S)
    selector.busy = True
    return selector, reader, writer


def _write_after(sock: socket.socket, delay_s: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay_s), sock.send(b"x")))
    thread.start()
    return thread


def test_what_comes_soon_after_a_look_waits_for_the_intervals_end(pair: Pair) -> None:
    selector, _, writer = pair
    assert selector.select(0) == []  # the loop looked
    began = time.monotonic()
    thread = _write_after(writer, 0.02)
    ready = selector.select(None)
    waited = time.monotonic() - began
    thread.join()
    assert len(ready) == 1
    assert waited >= INTERVAL_S * 0.8, "one wake-up at the interval's end, not at the event"
    assert waited < INTERVAL_S + 1


def test_what_is_ready_already_is_handled_at_once(pair: Pair) -> None:
    selector, _, writer = pair
    assert selector.select(0) == []
    writer.send(b"x")
    began = time.monotonic()
    assert len(selector.select(None)) == 1
    assert time.monotonic() - began < INTERVAL_S / 2


def test_a_busy_loop_that_waited_out_the_interval_is_woken_at_once(pair: Pair) -> None:
    selector, _, writer = pair
    assert selector.select(0) == []
    time.sleep(INTERVAL_S * 1.2)
    began = time.monotonic()
    thread = _write_after(writer, 0.02)
    assert len(selector.select(None)) == 1
    thread.join()
    assert time.monotonic() - began < INTERVAL_S / 2


def test_a_timer_keeps_its_time(pair: Pair) -> None:
    """The loop's own timeout (its next timer) is never outlasted."""
    selector, _, _ = pair
    assert selector.select(0) == []
    began = time.monotonic()
    assert selector.select(0.03) == []
    assert time.monotonic() - began < INTERVAL_S / 2


def test_a_quiet_loop_is_woken_at_once_by_each_event(
    make_pair: Callable[[float], Pair],
) -> None:
    """I/O events no more often than twice per interval (one turn streaming alone): the
    loop waits as the default one does."""
    selector, _, writer = make_pair(INTERVAL_S)
    assert not selector.busy
    assert selector.select(0) == []
    began = time.monotonic()
    thread = _write_after(writer, 0.02)
    assert len(selector.select(None)) == 1
    thread.join()
    assert time.monotonic() - began < INTERVAL_S / 2


def test_the_loop_is_busy_while_events_come_more_than_twice_an_interval(
    make_pair: Callable[[float], Pair],
) -> None:
    interval_s = 0.01
    window_s = interval_s * WINDOW_INTERVALS
    selector, reader, writer = make_pair(interval_s)

    def events(n: int, over_s: float) -> None:
        began = time.monotonic()
        for _ in range(n):
            writer.send(b"x")
            assert len(selector.select(0)) == 1
            reader.recv(16)
        time.sleep(max(0.0, over_s - (time.monotonic() - began)))

    events(BUSY_EVENTS_PER_INTERVAL * WINDOW_INTERVALS * 3, window_s * 1.1)
    selector.select(0)  # the window's end: decided
    assert selector.busy
    events(1, window_s * 1.1)
    selector.select(0)
    assert not selector.busy, "a window with one event: quiet again"


def test_a_loop_of_the_factory_runs_timers_and_threadsafe_calls() -> None:
    loop = loop_factory(20)()
    try:
        assert isinstance(loop, asyncio.SelectorEventLoop)

        async def main() -> float:
            done = asyncio.get_running_loop().create_future()
            began = time.monotonic()
            threading.Thread(
                target=lambda: loop.call_soon_threadsafe(done.set_result, None)
            ).start()
            await asyncio.wait_for(done, 5)
            await asyncio.sleep(0.05)
            return time.monotonic() - began

        took = loop.run_until_complete(main())
        assert 0.05 <= took < 2
    finally:
        loop.close()


def test_zero_is_the_default_loop_and_the_setting_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert loop_factory(0) is asyncio.new_event_loop
    with pytest.raises(ValueError):
        loop_factory(-1)
    monkeypatch.setenv("TURNS_LOOP_COALESCE_MS", "51")
    with pytest.raises(ValueError, match="TURNS_LOOP_COALESCE_MS"):
        Settings.from_env()
    monkeypatch.setenv("TURNS_LOOP_COALESCE_MS", "0")
    assert Settings.from_env().loop_coalesce_ms == 0
    monkeypatch.delenv("TURNS_LOOP_COALESCE_MS")
    assert Settings.from_env().loop_coalesce_ms == 20
