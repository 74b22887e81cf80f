"""The code blocks of README.md and the docs run as written (issue 16).

Every ```python block of a page runs, in order, as one script (so a block may use what an
earlier one defined); every ```bash block runs in bash, with `.venv/bin` on PATH, against a
worker this test starts on the default task queue (`durable-turns`), as the README's "in
another shell: `turns worker`" says. Lines that start a long-running process of their own
(`turns worker`, `turns server`, `turns serve`, `turns demo`) or the whole test suite are not
run here (the front door has its own tests, test_web*.py):
the worker is the test's own, and `turns demo` has its own test (test_front_door.py).
`turns cancel` exits 1 when nothing is running (as after the pages' turns): its line passes
when it says what it cancelled or that there was nothing to cancel.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness import Harness, WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    "README.md",
    "docs/clients.md",
    "docs/hooks.md",
    "docs/tools.md",
    "docs/streaming.md",
]
NOT_HERE = re.compile(r"^\s*(turns (worker|server|serve|demo)\b|python3? scripts/dev\.py)")
CANCEL = re.compile(r"^\s*turns cancel\b")
SAYS_WHAT_IT_CANCELLED = "^(turns: nothing to cancel|cancelled )"
BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.S | re.M)


def blocks(page: str, lang: str) -> list[str]:
    text = (ROOT / page).read_text()
    return [body for kind, body in BLOCK.findall(text) if kind == lang]


def runnable_bash(block: str) -> str:
    """The block without the lines this test does not run (see the module docstring);
    a continued line (``\\``) goes with its first line."""
    out: list[str] = []
    skipping = False
    for line in block.splitlines():
        if not skipping and NOT_HERE.match(line):
            skipping = line.rstrip().endswith("\\")
            continue
        if skipping:
            skipping = line.rstrip().endswith("\\")
            continue
        if CANCEL.match(line):  # exits 1 when nothing runs, as here: it must say so
            command = line.split("  #")[0].strip()
            line = f'({command} || true) 2>&1 | grep -E "{SAYS_WHAT_IT_CANCELLED}"'
        out.append(line)
    return "\n".join(out)


def test_every_page_has_its_blocks_found() -> None:
    assert len(blocks("README.md", "python")) == 1
    assert len(blocks("README.md", "bash")) == 4
    assert len(blocks("docs/hooks.md", "python")) >= 6
    assert len(blocks("docs/tools.md", "bash")) == 2


def page_env(harness: Harness, tmp_path: Path) -> dict[str, str]:
    env = harness.env(TURNS_TASK_QUEUE="durable-turns", TURNS_TOOLS="tests.support.tools")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TEMPORAL_ADDRESS"] = harness.address
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{ROOT}"
    return env


def test_every_python_example_ends_with_run() -> None:
    """A script that used a Temporal client can abort as the interpreter exits
    (sdk-python#300); every page's entry point is ``durable_turns.run``, never a bare
    ``asyncio.run``."""
    for page in PAGES:
        for block in blocks(page, "python"):
            assert not re.search(r"^\s*asyncio\.run\(", block, re.M), (page, block)
    entries = [
        block
        for page in PAGES
        for block in blocks(page, "python")
        if re.search(r"^run\(", block, re.M)
    ]
    assert len(entries) == 6  # README, clients.md (three scripts), tools.md, streaming.md


def scripts(python: list[str]) -> list[list[str]]:
    """A page's python blocks as the scripts they make: ``run(...)`` leaves the process, so
    a block that ends with it ends its script, and the next block starts another."""
    out: list[list[str]] = [[]]
    for block in python:
        out[-1].append(block)
        if re.search(r"^run\(", block, re.M):
            out.append([])
    return [segment for segment in out if segment]


GIVEN = {
    "docs/tools.md": (
        "from durable_turns import TurnsClient, run\n\n"
        "async def main() -> None:\n"
        "    client = await TurnsClient.connect()\n"
        '    await client.send("conv-1", "Where am I?")\n\n'
        "run(main())\n"
    ),
}
"""What a page's scripts take as given, run before them: tools.md answers the pending calls
of a conversation ``conv-1`` that its reader has (each page runs on a dev server of its own
when the suite runs in parallel, so no other page's ``conv-1`` is there)."""


@pytest.mark.parametrize("page", PAGES)
async def test_the_code_blocks_run_as_written(harness: Harness, page: str, tmp_path: Path) -> None:
    env = page_env(harness, tmp_path)
    python = blocks(page, "python")
    bash = [runnable_bash(b) for b in blocks(page, "bash")]
    if page == "docs/tools.md":  # its own worker serves the page's tools module
        (tmp_path / "mytools.py").write_text(python[0] + "\n\n" + python[1])
        env["TURNS_TOOLS"] = "mytools"
        env["TURNS_DEMO_DIR"] = str(tmp_path / "demo-scripts")  # as the page starts its worker
    worker = WorkerProcess(env, tmp_path / "worker.log")
    harness.workers.append(worker)
    worker.wait_ready()
    given = [[GIVEN[page]]] if page in GIVEN else []
    for n, segment in enumerate(given + scripts(python)):
        script = tmp_path / f"blocks-{n}.py"
        script.write_text("\n\n".join(segment))
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, f"{page}, python blocks:\n{out.stdout}\n{out.stderr}"
    for block in bash:
        out = await asyncio.to_thread(
            subprocess.run,
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, f"{page}, bash block:\n{block}\n{out.stdout}\n{out.stderr}"


async def test_the_readme_example_exits_0_every_time(harness: Harness, tmp_path: Path) -> None:
    """Issue 29: with a plain ``asyncio.run`` the README's example aborted as the interpreter
    exited (exit status 134, "PyGILState_Release", sdk-python#300) in about one run in 40
    here, and in 3 of 12 on a busier machine; ending with ``durable_turns.run`` it exits 0
    every time."""
    env = page_env(harness, tmp_path)
    worker = WorkerProcess(env, tmp_path / "worker.log")
    harness.workers.append(worker)
    worker.wait_ready()
    script = tmp_path / "readme_example.py"
    script.write_text(blocks("README.md", "python")[0])
    codes = []
    for _ in range(12):
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        codes.append(out.returncode)
        assert out.returncode == 0, f"runs {codes}:\n{out.stdout}\n{out.stderr}"
        assert "completed" in out.stdout and "Fatal Python error" not in out.stderr


ENTRY_CASES = [
    ("async def main():\n    print('done')", 0, "done", ""),
    ("async def main():\n    return 3", 3, "", ""),
    ("async def main():\n    raise SystemExit('no config')", 1, "", "no config"),
    ("async def main():\n    raise SystemExit(4)", 4, "", ""),
    ("async def main():\n    raise KeyError('k')", 1, "", "KeyError: 'k'"),
]


@pytest.mark.parametrize("form", ["run(main())", "entry.call(main)"])
@pytest.mark.parametrize(("code", "status", "stdout", "stderr"), ENTRY_CASES)
def test_run_exits_with_the_scripts_own_status(
    form: str, code: str, status: int, stdout: str, stderr: str, tmp_path: Path
) -> None:
    """``durable_turns.run`` (and ``entry.call`` for a plain function, as ``worker.py`` ends):
    sys.exit(asyncio.run(main()))'s status, atexit handlers run, output flushed even when
    piped, nothing after it runs."""
    if form.startswith("entry.call"):
        code = code.replace("async def", "def")
    script = tmp_path / "entry.py"
    script.write_text(
        "import atexit, logging, sys\n"
        "from durable_turns import entry, run\n"
        "atexit.register(lambda: print('atexit ran', file=sys.stderr))\n"
        "sys.stdout.write('buffered ')\n"
        f"{code}\n"
        f"{form}\n"
        "print('after run')\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == status, out.stderr
    assert out.stdout.startswith("buffered ") and stdout in out.stdout
    assert "after run" not in out.stdout
    assert stderr in out.stderr and out.stderr.rstrip().endswith("atexit ran")


def test_a_pool_that_ends_on_leave_does_not_hold_the_exit(tmp_path: Path) -> None:
    """``leave`` joins the process's threads; an idle ``ThreadPoolExecutor`` thread waits for
    work for ever unless its pool is shut down first, as ``entry.ends_on_leave`` has it (the
    engine's hook, tool and extension pools: a worker that had run a plain-def hook hung
    after "worker stopped")."""
    script = tmp_path / "pool.py"
    script.write_text(
        "import concurrent.futures\n"
        "from durable_turns import entry\n"
        "pool = entry.ends_on_leave(concurrent.futures.ThreadPoolExecutor(2))\n"
        "print(pool.submit(lambda: 'ran in the pool').result())\n"
        "entry.call(lambda: None)\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=30, cwd=tmp_path
    )
    assert (out.returncode, out.stdout) == (0, "ran in the pool\n"), out.stderr
