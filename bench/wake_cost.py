"""Micro-benchmark: the CPU a process is charged for waking up, on this machine.

``bench.cost`` charges each system the user + system CPU of its process per streamed token.
On a virtual machine part of that is not Python's work: a thread that blocks (an event loop
waiting in ``epoll_wait``) and is woken again is charged for the wake-up itself, and how much
depends on the machine, on how long the wait was and on whether the CPU went idle meanwhile.
This measures it in one process, against the cheapest turn of an event loop in the same run:

* ``zero-timeout turn``: ``await asyncio.sleep(0)``, a turn of the loop that never blocks
  (the baseline);
* ``timer, 1 ms`` and ``timer, 10 ms``: ``await asyncio.sleep(...)``, the loop blocked until
  its timer (a group commit's interval, a publisher's flush timer);
* ``socket, every 10 ms``: the loop blocked until a datagram another process sends every
  10 ms (a model's token on its socket, a reader's wake-up).

Each kind runs ``--wakes`` times per round; it prints the median CPU per wake-up
(``time.process_time``) over ``--rounds`` rounds and its ratio to the zero-timeout turn's.
Usage: ``.venv/bin/python -m bench.wake_cost [--wakes 300] [--rounds 3]``. Not a test: the
figures depend on the machine and on what else runs on it; compare the rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import time
import uuid

_SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
address, n, period = b"\\0" + sys.argv[1].encode(), int(sys.argv[2]), float(sys.argv[3])
due = time.monotonic()
for _ in range(n):
    due += period
    time.sleep(max(0.0, due - time.monotonic()))
    s.sendto(b"x", address)
"""
"""Sends ``n`` datagrams to an abstract socket, one per ``period`` seconds."""

WARM_UP = 20
"""Wake-ups not counted at the start of each socket round (the sender starting)."""


async def loop_turns(wakes: int, sleep_s: float) -> float:
    """CPU µs per ``asyncio.sleep(sleep_s)``."""
    began = time.process_time()
    for _ in range(wakes):
        await asyncio.sleep(sleep_s)
    return (time.process_time() - began) / wakes * 1e6


async def socket_wakes(wakes: int, period_s: float) -> float:
    """CPU µs per wake-up by a datagram from another process, one per ``period_s``."""
    loop = asyncio.get_running_loop()
    name = f"durable-turns-bench-wake-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.setblocking(False)
    got = 0
    woken = asyncio.Event()

    def readable() -> None:
        nonlocal got
        while True:
            try:
                sock.recv(16)
            except BlockingIOError:
                break
            got += 1
        woken.set()

    total = wakes + WARM_UP
    argv = [sys.executable, "-c", _SENDER, name, str(total), str(period_s)]
    sender = await asyncio.create_subprocess_exec(*argv)
    loop.add_reader(sock.fileno(), readable)
    try:
        deadline = period_s * total + 30
        async with asyncio.timeout(deadline):
            while got < WARM_UP:
                woken.clear()
                await woken.wait()
            counted_from, began = got, time.process_time()
            while got < total:
                woken.clear()
                await woken.wait()
            return (time.process_time() - began) / (got - counted_from) * 1e6
    finally:
        loop.remove_reader(sock.fileno())
        sock.close()
        if sender.returncode is None:
            sender.kill()
        await sender.wait()


KINDS = {
    "zero-timeout turn": lambda n: loop_turns(n, 0.0),
    "timer, 1 ms": lambda n: loop_turns(n, 0.001),
    "timer, 10 ms": lambda n: loop_turns(n, 0.01),
    "socket, every 10 ms": lambda n: socket_wakes(n, 0.01),
}


async def measure(wakes: int, rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(rounds):
        for kind, run in KINDS.items():
            results[kind].append(await run(wakes))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wake_cost", description=__doc__)
    parser.add_argument("--wakes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.wakes < 1 or args.rounds < 1:
        parser.error("--wakes and --rounds must be >= 1")
    results = asyncio.run(measure(args.wakes, args.rounds))
    base = statistics.median(results["zero-timeout turn"])
    print(f"{args.wakes} wake-ups a kind, {args.rounds} rounds, load {os.getloadavg()[0]:.2f}")
    print(f"{'kind':<22} {'CPU µs/wake-up':>15} {'ratio':>7}  rounds")
    for kind, values in results.items():
        value = statistics.median(values)
        rounds = " ".join(f"{v:.0f}" for v in values)
        print(f"{kind:<22} {value:>15.1f} {value / base:>6.1f}×  {rounds}")


if __name__ == "__main__":
    main()
