"""The package uses temporalio's public API only (issue 35): an AST scan of every module of
``durable_turns/``, ``workflows/``, ``activities/``, ``hooks/`` and ``worker.py``.

It fails on an import of a temporalio module path with a part that starts with ``_``, or of a
name that does (``from temporalio.x import _y``); on anything from ``temporalio.bridge`` but
its protobuf types (``temporalio.bridge.proto``); on a private name read through a temporalio
module (``activity._Context``); and on an assignment to an attribute of a temporalio module
(``temporalio.x.y = …``, or through a name bound to one), which would change the SDK for the
whole process.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["durable_turns", "workflows", "activities", "hooks", "worker.py"]


def sources() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return sorted({f.resolve() for f in files})


def _module_problem(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "temporalio":
        return None
    if any(p.startswith("_") for p in parts):
        return f"private temporalio module {module}"
    if parts[:2] == ["temporalio", "bridge"] and parts[:3] != ["temporalio", "bridge", "proto"]:
        return f"{module}: only temporalio.bridge.proto's types may be used"
    return None


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    modules: set[str] = set()  # local names bound to a temporalio module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if problem := _module_problem(alias.name):
                    found.append(f"{path.name}:{node.lineno}: {problem}")
                if alias.name.split(".")[0] == "temporalio":
                    modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if problem := _module_problem(node.module):
                found.append(f"{path.name}:{node.lineno}: {problem}")
            if node.module.split(".")[0] == "temporalio":
                for alias in node.names:
                    if alias.name.startswith("_"):
                        found.append(f"{path.name}:{node.lineno}: private name {alias.name}")
                    if problem := _module_problem(f"{node.module}.{alias.name}"):
                        if not alias.name[:1].isupper():  # a module, not a type
                            found.append(f"{path.name}:{node.lineno}: {problem}")
                    if alias.name[:1].islower():
                        modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root: ast.expr = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in modules | {"temporalio"}:
                found.append(f"{path.name}:{node.lineno}: private name {ast.unparse(node)}")
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute):
                root = target.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in modules | {"temporalio"}:
                    found.append(f"{path.name}:{node.lineno}: assignment to {ast.unparse(target)}")
    return found


def test_the_package_uses_temporalios_public_api_only() -> None:
    files = sources()
    assert len(files) > 50 and any(f.name == "plugin.py" for f in files)
    found = [p for f in files for p in problems(f)]
    assert found == []


def test_the_scan_finds_each_kind_of_private_use(tmp_path: Path) -> None:
    """What the scan rejects, each kind once (it must not pass by finding nothing)."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import temporalio.bridge.worker as bridge_worker\n"
        "from temporalio.converter import _extstore\n"
        "from temporalio.worker.workflow_sandbox._runner import Thing\n"
        "from temporalio.bridge import worker\n"
        "import temporalio.converter\n"
        "bridge_worker.decode_activation = None\n"
        "temporalio.converter.x = 1\n"
        "from temporalio.bridge.proto.workflow_activation import WorkflowActivation\n"
        "from temporalio import workflow\n"
        "workflow.x = 1\n"
        "from temporalio import activity\n"
        "activity._Context.current()\n"
        "print(workflow.__name__)\n"
    )
    found = problems(bad)
    assert any("temporalio.bridge.worker" in p for p in found), found
    assert any("private name _extstore" in p for p in found), found
    assert any("private temporalio module" in p and "_runner" in p for p in found), found
    assert any(":4:" in p for p in found), found
    assert any("assignment to bridge_worker.decode_activation" in p for p in found), found
    assert any("assignment to temporalio.converter.x" in p for p in found), found
    assert any("assignment to workflow.x" in p for p in found), found
    assert any("private name activity._Context" in p for p in found), found
    # protobuf types (line 8), the modules' imports (9, 11) and a dunder (13) are fine
    assert {p.split(":")[1] for p in found} == {"1", "2", "3", "4", "6", "7", "10", "12"}, found
