"""Busy processes that keep the machine's cores loaded while a test runs.

These machines are shared: a guarantee that holds only on an idle box is not one. ``busy_cores``
starts one process per core (at least two), each spinning in a loop, and stops exactly those
processes (by their own pid) when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

SPIN = "while True:\n    pass\n"


@contextlib.contextmanager
def busy_cores(count: int | None = None) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` (default: one per core, at least 2) spinning processes, for the block."""
    n = count or max(2, os.cpu_count() or 2)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SPIN],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(n)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
