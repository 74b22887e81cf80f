"""The event-loop watchdog (``activities.loopwatch``): one thread for every watched loop,
a blocked loop named in the log, the others left alone."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from durable_turns.activities import loopwatch


def _loop_thread() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return loop, thread


@pytest.fixture
def loops() -> Iterator[list[asyncio.AbstractEventLoop]]:
    made = [_loop_thread() for _ in range(3)]
    yield [loop for loop, _ in made]
    for loop, thread in made:  # closed, not only stopped: the watchdog then lets them go
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def _watched(loop: asyncio.AbstractEventLoop, number: int) -> None:
    done = threading.Event()

    def register() -> None:
        loopwatch.watch(loop, number)
        done.set()

    loop.call_soon_threadsafe(register)
    assert done.wait(5)


def test_one_thread_watches_every_loop_and_names_the_blocked_one(
    loops: list[asyncio.AbstractEventLoop], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="durable_turns.loop")
    for number, loop in enumerate(loops, start=90):
        _watched(loop, number)
    watchdogs = [t for t in threading.enumerate() if t.name == "turns-loopwatch"]
    assert len(watchdogs) == 1  # not a thread per loop: an idle worker's loops cost no wake-ups

    blocked_s = loopwatch.LAG_S * 1.8
    loops[0].call_soon_threadsafe(time.sleep, blocked_s)  # blocks user loop 90
    time.sleep(blocked_s + loopwatch.LAG_S * 0.75)

    messages = [r.getMessage() for r in caplog.records]
    blocked = [m for m in messages if m.startswith("event loop blocked")]
    assert len(blocked) == 1 and "(user loop 90)" in blocked[0], messages
    freed = [m for m in messages if "free again" in m]
    assert len(freed) == 1 and "(user loop 90)" in freed[0], messages
    seconds = float(freed[0].split("after ")[1].split("s of")[0])
    assert loopwatch.LAG_S <= seconds <= blocked_s + loopwatch.LAG_S / 2


def test_a_closed_loop_is_let_go() -> None:
    loop, thread = _loop_thread()
    _watched(loop, 93)
    loop.call_soon_threadsafe(time.sleep, loopwatch.LAG_S / 2)  # pings queue behind it
    loop.call_soon_threadsafe(loop.stop)  # ahead of them: a ping is left unanswered
    thread.join(5)
    loop.close()
    time.sleep(loopwatch.LAG_S / 2)  # two rounds of the watchdog
    assert id(loop) not in loopwatch._watched
