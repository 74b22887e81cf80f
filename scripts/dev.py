#!/usr/bin/env python3
"""Set-up and the two front-door commands, with nothing but Python 3.11 and pip.

    python3 scripts/dev.py demo     create .venv, install the project, run the offline demo
    python3 scripts/dev.py test     the same set-up, then the whole test suite (in parallel)
    python3 scripts/dev.py lint     ruff and mypy
    python3 scripts/dev.py bench    the benchmarks

The virtual environment is (re)installed only when pyproject.toml changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"


def ensure_env() -> None:
    if not PY.exists():
        print("creating .venv …", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    stamp = VENV / ".installed"
    pinned = [ROOT / "pyproject.toml", ROOT / "constraints.txt"]  # the tested versions
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in pinned)).hexdigest()
    if not stamp.exists() or stamp.read_text() != digest:
        print("installing durable-turns and its test tools into .venv …", flush=True)
        subprocess.run(
            [
                str(PY),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-c",
                "constraints.txt",
                "-e",
                ".[test]",
            ],
            cwd=ROOT,
            check=True,
        )
        stamp.write_text(digest)


def ensure_js() -> None:
    """The front door's tests drive the real ``ai`` npm client: install ``tests/js`` from its
    lock file when it changed (skipped, and those tests with it, where there is no npm)."""
    js = ROOT / "tests" / "js"
    npm = shutil.which("npm")
    if npm is None:
        print("npm not found: the front door's browser-client tests will be skipped", flush=True)
        return
    installed = js / "node_modules" / ".package-lock.json"  # npm writes it as it installs
    lock = js / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        print("installing the tests' npm packages (tests/js) …", flush=True)
        subprocess.run(
            [npm, "ci", "--prefix", str(js), "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=ROOT,
            check=True,
        )


def say_where_the_commands_are() -> None:
    """The README's `turns` and `temporal` lines need .venv/bin on PATH: say so, unless it is."""
    found = shutil.which("turns")
    if found and Path(found).resolve() == (BIN / "turns").resolve():
        return
    where = os.path.relpath(BIN)
    print(
        f"\n(`turns` and `temporal` are in {where}: `source {where}/activate`, or"
        f' `export PATH="$PWD/{where}:$PATH"` from here, to type them as the README does)',
        flush=True,
    )


PARALLEL = ["-n", os.environ.get("TURNS_TEST_PROCESSES", "4"), "--dist", "worksteal"]
"""How ``test`` runs pytest unless told otherwise (``-n``, or ``-p no:xdist``): four pytest
processes, each with a Temporal dev server, replay server and workers of its own (the
fixtures are per process, the stores per test). Most of a test's time is waiting on
processes and timers, so four keep a 2-core machine busy. Six took 12.7 minutes against
15.4, but starved the tests' servers: a gRPC call took 8 s and a model step missed its 2 s
test heartbeat timeout in one of three runs. ``TURNS_TEST_PROCESSES=0`` runs the suite in
one process."""


def pytest_args(rest: list[str]) -> list[str]:
    """``rest`` with :data:`PARALLEL` unless it says how to run, and the 20 slowest tests
    listed at the end unless it says how many (CI's report of where the time goes)."""
    told = any(a in ("-n", "--numprocesses", "no:xdist") or a.startswith("-n") for a in rest)
    durations = [] if any(a.startswith("--durations") for a in rest) else ["--durations=20"]
    return [*durations, *rest] if told else [*PARALLEL, *durations, *rest]


def run(*cmd: str) -> int:
    return subprocess.run(list(cmd), cwd=ROOT).returncode


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    rest = sys.argv[2:]
    if command not in ("demo", "test", "lint", "bench"):
        sys.exit(__doc__)
    ensure_env()
    if command == "demo":
        code = run(str(BIN / "turns"), "demo", *rest)
        say_where_the_commands_are()
    elif command == "test":
        ensure_js()
        code = run(str(PY), "-m", "pytest", *pytest_args(rest))
    elif command == "lint":
        code = run(str(BIN / "ruff"), "check", ".") or run(
            str(BIN / "ruff"), "format", "--check", "."
        )
        code = code or run(str(BIN / "mypy"))
    else:
        code = run(str(PY), "-m", "bench", *rest)
    sys.exit(code)


if __name__ == "__main__":
    main()
