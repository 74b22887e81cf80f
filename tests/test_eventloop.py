"""The worker's event loop (``durable_turns.eventloop``): while busy, one wait per interval
for the network; what other threads hand it, at once."""

from __future__ import annotations

import asyncio
import os
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
    local_stream,
    loop_factory,
)

INTERVAL_S = 0.2
Pair = tuple[CoalescingSelector, socket.socket, socket.socket]


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair of loopback TCP sockets (reader, writer): network I/O, as a model's
    stream is."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        writer = socket.create_connection(server.getsockname())
        reader, _ = server.accept()
    return reader, writer


@pytest.fixture
def make_pair() -> Iterator[Callable[[float], Pair]]:
    """Makes a selector (of that interval) watching a TCP connection's reader; all are
    closed when the test ends."""
    made: list[Pair] = []

    def make(interval_s: float) -> Pair:
        selector = CoalescingSelector(interval_s)
        reader, writer = tcp_pair()
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


def test_a_local_streams_event_is_never_held_back(pair: Pair) -> None:
    """asyncio's self-pipe (another thread's call) wakes a busy loop at once, and the network
    that is ready by then comes with it."""
    selector, reader, writer = pair
    local_reader, local_writer = socket.socketpair()
    try:
        local_reader.setblocking(False)
        selector.register(local_reader, selectors.EVENT_READ)
        assert selector.select(0) == []  # the loop looked
        began = time.monotonic()
        threads = [_write_after(writer, 0.01), _write_after(local_writer, 0.03)]
        ready = selector.select(None)  # the network's event is held, the local one is not
        waited = time.monotonic() - began
        for thread in threads:
            thread.join()
        assert {key.fileobj for key, _ in ready} == {local_reader, reader}
        assert waited < INTERVAL_S / 2, "the local stream's event ended the sleep"
        selector.unregister(local_reader)
        local_reader.recv(16)
        reader.recv(16)
        assert selector.select(0) == []
        began = time.monotonic()
        threads = [_write_after(local_writer, 0.01), _write_after(writer, 0.03)]
        assert len(selector.select(None)) == 1  # no longer watched: the interval holds
        assert time.monotonic() - began >= INTERVAL_S * 0.8
        for thread in threads:
            thread.join()
    finally:
        local_reader.close()
        local_writer.close()


def test_local_stream_is_a_unix_stream_socket_only() -> None:
    unix_stream = socket.socketpair()
    unix_dgram = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    tcp = tcp_pair()
    pipe = os.pipe()
    try:
        assert local_stream(unix_stream[0].fileno())
        assert not local_stream(unix_dgram[0].fileno())
        assert not local_stream(tcp[0].fileno())
        assert not local_stream(pipe[0])
        unix_stream[0].send(b"x")  # the descriptor is still its owner's
        assert unix_stream[1].recv(1) == b"x"
    finally:
        for sock in (*unix_stream, *unix_dgram, *tcp):
            sock.close()
        os.close(pipe[0])
        os.close(pipe[1])


def test_a_busy_loops_threadsafe_calls_run_at_once() -> None:
    """The loop's own self-pipe is a local stream: another thread's call (a Temporal task, a
    thread pool's result) does not wait for the interval's end."""
    selector = CoalescingSelector(INTERVAL_S)
    loop = asyncio.SelectorEventLoop(selector)
    try:

        async def main() -> float:
            selector.busy = True
            await asyncio.sleep(0)  # the loop looked a moment ago
            done = asyncio.get_running_loop().create_future()
            began = time.monotonic()
            threading.Thread(
                target=lambda: (time.sleep(0.02), loop.call_soon_threadsafe(done.set_result, None))
            ).start()
            await asyncio.wait_for(done, 5)
            return time.monotonic() - began

        took = loop.run_until_complete(main())
        assert took < INTERVAL_S / 2, f"the call waited {took:.3f} s"
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
