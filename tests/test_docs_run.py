"""The code blocks of README.md and the docs run as written (issue 16).

Every ```python block of a page runs, in order, as one script (so a block may use what an
earlier one defined); every ```bash block runs in bash, with `.venv/bin` on PATH, against a
worker this test starts on the default task queue (`durable-turns`), as the README's "in
another shell: `turns worker`" says. Lines that start a long-running process of their own
(`turns worker`, `turns server`, `turns demo`) or the whole test suite are not run here:
the worker is the test's own, and `turns demo` has its own test (test_front_door.py).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness import Harness, WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/clients.md", "docs/hooks.md", "docs/tools.md"]
NOT_HERE = re.compile(r"^\s*(turns (worker|server|demo)\b|python3? scripts/dev\.py)")
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
        out.append(line)
    return "\n".join(out)


def test_every_page_has_its_blocks_found() -> None:
    assert len(blocks("README.md", "python")) == 1
    assert len(blocks("README.md", "bash")) == 3
    assert len(blocks("docs/hooks.md", "python")) >= 6
    assert len(blocks("docs/tools.md", "bash")) == 2


def succeeded(out: subprocess.CompletedProcess[str]) -> bool:
    """Exit status 0, or the abort temporalio's runtime can cause once everything has run,
    as the interpreter finalizes (sdk-python#300: "PyGILState_Release ... must be current",
    SIGABRT): the blocks ran to their end, which is what this test checks."""
    at_exit = out.returncode == -signal.SIGABRT and "PyGILState_Release" in out.stderr
    return out.returncode == 0 or (at_exit and "Traceback" not in out.stderr)


@pytest.mark.parametrize("page", PAGES)
async def test_the_code_blocks_run_as_written(harness: Harness, page: str, tmp_path: Path) -> None:
    env = harness.env(TURNS_TASK_QUEUE="durable-turns", TURNS_TOOLS="tests.support.tools")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TEMPORAL_ADDRESS"] = harness.address
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{ROOT}"
    python = blocks(page, "python")
    bash = [runnable_bash(b) for b in blocks(page, "bash")]
    if page == "docs/tools.md":  # its own worker serves the page's tools module
        (tmp_path / "mytools.py").write_text(python[0] + "\n\n" + python[1])
        env["TURNS_TOOLS"] = "mytools"
        env["TURNS_DEMO_DIR"] = str(tmp_path / "scripts")  # as the page starts its worker
    worker = WorkerProcess(env, tmp_path / "worker.log")
    harness.workers.append(worker)
    worker.wait_ready()
    if python:
        script = tmp_path / "blocks.py"
        script.write_text("\n\n".join(python))
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert succeeded(out), f"{page}, python blocks:\n{out.stdout}\n{out.stderr}"
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
