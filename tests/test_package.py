"""The installed package: one namespace, every public module importable first, no shadowing."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

import durable_turns

ROOT = Path(__file__).resolve().parent.parent

PUBLIC_MODULES = [
    "durable_turns",
    "durable_turns.contract",
    "durable_turns.messages",
    "durable_turns.config",
    "durable_turns.tools",
    "durable_turns.transforms",
    "durable_turns.hooks",
    "durable_turns.hooks.types",
    "durable_turns.hooks.base",
    "durable_turns.store",
    "durable_turns.streams",
    "durable_turns.models",
    "durable_turns.models.anthropic",
    "durable_turns.models.openai",
    "durable_turns.activities",
    "durable_turns.workflows.conversation",
    "durable_turns.workflows.turn",
    "durable_turns.runtime",
    "durable_turns.client",
    "durable_turns.cli",
    "durable_turns.entry",
]


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter whose current directory is ``cwd`` (not the repo)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_module_imports_first_in_a_fresh_interpreter(
    module: str, tmp_path: Path
) -> None:
    done = run_python(f"import {module}", tmp_path)
    assert done.returncode == 0, done.stderr


def isort_order(name: str) -> tuple[int, str]:
    """ruff's RUF022 order (isort-style): CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_every_public_name_resolves_from_the_top() -> None:
    assert sorted(durable_turns.__all__, key=isort_order) == durable_turns.__all__
    assert "AgentTask" in durable_turns.__all__  # agent_tool's default input model
    for name in durable_turns.__all__:
        assert getattr(durable_turns, name) is not None
    with pytest.raises(AttributeError):
        _ = durable_turns.not_a_public_name  # type: ignore[attr-defined]


def test_a_users_hooks_module_imports_on_its_own(tmp_path: Path) -> None:
    """What a user's unit test of their hooks does: import their module first."""
    (tmp_path / "myhooks.py").write_text(
        textwrap.dedent(
            """
            from durable_turns import TurnConfig, TurnContext, TurnHooks

            class MyHooks(TurnHooks):
                async def before_turn(self, ctx: TurnContext) -> TurnConfig:
                    return TurnConfig(max_steps=3)
            """
        )
    )
    done = run_python(
        """
        import asyncio, myhooks
        from durable_turns import TurnContext
        ctx = TurnContext(
            system="", messages=[], tools=[], model="demo:weather", continuation=False,
            body={}, request_id="r1", conversation_id="c1", turn_number=1,
        )
        print(asyncio.run(myhooks.MyHooks().before_turn(ctx)).max_steps)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"


def test_an_app_laid_out_like_temporals_samples_is_not_shadowed(tmp_path: Path) -> None:
    """An application with its own activities.py, workflows.py and worker.py."""
    for name in ("activities", "workflows", "worker", "hooks"):
        (tmp_path / f"{name}.py").write_text(f"NAME = {name!r}\n")
    done = run_python(
        """
        import activities, workflows, worker, hooks
        from durable_turns.store import open_store
        from durable_turns.activities import all_activities
        from durable_turns.workflows.turn import TurnWorkflow
        assert (activities.NAME, workflows.NAME, worker.NAME, hooks.NAME) == (
            "activities", "workflows", "worker", "hooks")
        print("ok")
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_wheel_installs_one_top_level_name(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__"),
    )
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("durable_turns-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"durable_turns"}
    for folder in ("workflows", "activities", "hooks", "store", "streams", "models"):
        assert f"durable_turns/{folder}/__init__.py" in names
    assert "durable_turns/py.typed" in names
    assert not any(n.startswith("testkit/") for n in names)  # a developer's tool


def imported_modules(folder: Path) -> dict[str, set[str]]:
    """``file -> the top-level names it imports`` for every Python file under ``folder``."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        tops: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = tops
    return found


def named_modules(folder: Path, barred: set[str]) -> dict[str, list[str]]:
    """``file -> module names under ``barred`` in its strings`` for every Python file under
    ``folder``: names a worker or a subprocess imports at run time (``TURNS_TOOLS``,
    ``TURNS_HOOKS``, ``python -m …``), which no import statement shows."""
    pattern = re.compile(rf"(?<![\w.])(?:{'|'.join(map(re.escape, sorted(barred)))})\.[A-Za-z_]\w*")
    found: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        names = [
            match
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            for match in pattern.findall(node.value)
        ]
        if names:
            found[str(path.relative_to(ROOT))] = names
    return found


def test_bench_and_the_test_kit_import_nothing_from_the_tests() -> None:
    """What both need lives in ``testkit/``; the tests may import it, never the reverse: no
    import statement, and no module name in a string (a worker's ``TURNS_TOOLS``, say)."""
    for folder, barred in (("bench", {"tests"}), ("testkit", {"tests", "bench"})):
        modules = imported_modules(ROOT / folder)
        assert len(modules) > 5, folder
        strays = {path: sorted(tops & barred) for path, tops in modules.items() if tops & barred}
        assert strays == {}, folder
        assert named_modules(ROOT / folder, barred) == {}, folder
    assert "testkit" in set().union(*imported_modules(ROOT / "bench").values())
    # the scan sees what it looks for
    assert named_modules(ROOT / "tests" / "support", {"tests"})["tests/support/hooks.py"]


def test_turns_version_is_the_installed_distributions() -> None:
    """``turns --version`` prints the installed version (``pyproject.toml``'s when installed
    from this tree), and CHANGELOG.md's newest entry is ``pyproject.toml``'s version."""
    out = subprocess.run(
        [sys.executable, "-m", "durable_turns.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert out.strip() == f"turns {importlib.metadata.version('durable-turns')}"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    newest = re.search(r"^## (\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert newest is not None and newest.group(1) == version


def test_the_tests_run_on_the_pinned_versions() -> None:
    """``constraints.txt`` is what the suite runs on: every pin is the installed version,
    and every dependency pyproject.toml names (the package's and its test extra's) has one."""
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[_canonical(name)] = version.strip()
    wrong = {
        name: (version, importlib.metadata.version(name))
        for name, version in pins.items()
        if importlib.metadata.version(name) != version
    }
    assert wrong == {}, "pinned, installed"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = project["dependencies"] + project["optional-dependencies"]["test"]
    unpinned = [d for d in named if _canonical(re.split(r"[<>=!~\[ ;]", d)[0]) not in pins]
    assert unpinned == [] and len(pins) > 20


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
