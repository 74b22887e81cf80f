"""A lint of the workflow modules: no call that is not deterministic (issue 35, item 3).

The engine's workflows run outside temporalio's sandbox by default (the SDK's public
``UnsandboxedWorkflowRunner``; docs/architecture.md says why), so what the sandbox would catch
as it runs is rejected here, before it runs: the clock, randomness, uuids, I/O, threads and
the event loop's own machinery. The workflow API has deterministic forms of each
(``workflow.now()``, ``workflow.random()``, ``workflow.uuid4()``, activities, timers). CI also
runs the workflow tests with the sandbox on (``.ci/run``), and every recorded history replays
under both runners (``test_replay.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_MODULES = sorted((ROOT / "workflows").glob("*.py"))

BANNED_MODULES = {
    "time": "the clock: workflow.now() / workflow.time()",
    "random": "randomness: workflow.random()",
    "secrets": "randomness: workflow.random()",
    "uuid": "uuids: workflow.uuid4()",
    "os": "the environment and files: an activity",
    "io": "I/O: an activity",
    "pathlib": "files: an activity",
    "socket": "network I/O: an activity",
    "ssl": "network I/O: an activity",
    "http": "network I/O: an activity",
    "urllib": "network I/O: an activity",
    "httpx": "network I/O: an activity",
    "requests": "network I/O: an activity",
    "sqlite3": "a database: an activity",
    "subprocess": "processes: an activity",
    "multiprocessing": "processes: an activity",
    "threading": "threads: the workflow's own tasks",
    "concurrent": "threads: the workflow's own tasks",
    "signal": "process signals",
}

BANNED_CALLS = {
    "datetime.now": "workflow.now()",
    "datetime.utcnow": "workflow.now()",
    "datetime.today": "workflow.now()",
    "date.today": "workflow.now()",
    "open": "an activity",
    "input": "an activity",
    "print": "workflow.logger",
    "asyncio.run": "the workflow's own loop",
    "asyncio.get_event_loop": "the workflow's own loop",
    "asyncio.new_event_loop": "the workflow's own loop",
    "asyncio.set_event_loop": "the workflow's own loop",
    "asyncio.to_thread": "an activity",
    "asyncio.run_coroutine_threadsafe": "the workflow's own tasks",
    "asyncio.create_subprocess_exec": "an activity",
    "asyncio.create_subprocess_shell": "an activity",
    "asyncio.open_connection": "an activity",
    "asyncio.start_server": "an activity",
    "asyncio.sleep": "workflow.sleep() (a timer with a summary)",
    "asyncio.wait_for": "workflow.wait_condition(timeout=…) or workflow.sleep()",
    "asyncio.timeout": "workflow.wait_condition(timeout=…)",
    "run_in_executor": "an activity",
}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def problems(source: str, name: str = "<source>") -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            modules = [node.module or ""]
        else:
            modules = []
        for module in modules:
            top = module.split(".")[0]
            if top in BANNED_MODULES:
                found.append(f"{name}:{node.lineno}: import {module}: {BANNED_MODULES[top]}")
        if isinstance(node, ast.Call):
            called = _dotted(node.func)
            for banned, instead in BANNED_CALLS.items():
                if called == banned or called.endswith("." + banned):
                    found.append(f"{name}:{node.lineno}: {called}(): use {instead}")
    return found


def test_workflow_code_makes_no_non_deterministic_call() -> None:
    assert len(WORKFLOW_MODULES) >= 5
    found = [p for path in WORKFLOW_MODULES for p in problems(path.read_text(), path.name)]
    assert found == []


def test_the_lint_rejects_each_kind() -> None:
    source = (
        "import time\nimport random\nfrom uuid import uuid4\nimport threading\n"
        "from datetime import datetime\n"
        "async def f(loop):\n"
        "    datetime.now()\n    open('x')\n    await asyncio.sleep(1)\n"
        "    asyncio.get_event_loop()\n    loop.run_in_executor(None, f)\n"
        "    workflow.now()\n    await workflow.sleep(1)\n"
    )
    lines = {int(p.split(":")[1]) for p in problems(source)}
    assert lines == {1, 2, 3, 4, 7, 8, 9, 10, 11}, problems(source)
