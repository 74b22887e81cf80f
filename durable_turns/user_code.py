"""Loading the user's own modules, named by ``--tools``, ``--hooks`` and ``--transforms``
(``TURNS_TOOLS``, ``TURNS_HOOKS``, ``TURNS_TRANSFORMS``): found in the current directory too,
each failure one clear ``ValueError`` that names the flag, the module and where it broke.
Used by the plugin when a worker starts and by ``turns worker`` to fail in a second, before
any server starts."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Callable
from typing import TypeVar

from durable_turns.hooks import TurnHooks
from durable_turns.tools import ToolRegistry
from durable_turns.transforms import load_transforms

T = TypeVar("T")


def _cwd_on_path() -> None:
    """Modules named by --tools/--hooks/--transforms are found in the current directory
    too (as uvicorn and celery do), wherever the ``turns`` script itself lives."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def _user_import(flag: str, name: str, load: Callable[[str], T]) -> T:
    """``load(name)`` for a user's module, with any failure as one clear ``ValueError``."""
    _cwd_on_path()
    try:
        return load(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise ValueError(
                f"{flag} {name}: no module named {e.name!r} in {os.getcwd()} or on PYTHONPATH"
            ) from None
        raise ValueError(f"{flag} {name}: importing it failed: {e}{_origin(e)}") from None
    except ValueError as e:
        raise ValueError(f"{flag} {name}: {e}") from None
    except Exception as e:
        raise ValueError(
            f"{flag} {name}: importing it raised {type(e).__name__}: {e}{_origin(e)}"
        ) from None


def _origin(error: BaseException) -> str:
    """`` (at file:line)``: the innermost frame of the traceback, in the user's code."""
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if "importlib" not in f.filename and f.filename != __file__]
    if isinstance(error, SyntaxError) and error.filename:
        return f" (at {error.filename}:{error.lineno})"
    return f" (at {own[-1].filename}:{own[-1].lineno})" if own else ""


def _module_name(name: str) -> str:
    """``myhooks.py`` or ``./myhooks.py`` work as ``myhooks``."""
    name = name.strip()
    if name.endswith(".py"):
        name = name[: -len(".py")].removeprefix("./").replace("/", ".")
    return name


def load_hooks(spec: str | None) -> TurnHooks:
    """``module:Class`` → an instance of that TurnHooks subclass (default hooks without one)."""
    if not spec:
        return TurnHooks()
    module_name, _, class_name = spec.partition(":")
    if not class_name:
        raise ValueError(f"--hooks takes module:Class, got {spec!r}")
    module = _user_import("--hooks", _module_name(module_name), importlib.import_module)
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ValueError(f"--hooks {spec}: module {module.__name__!r} has no {class_name!r}")
    if not (isinstance(cls, type) and issubclass(cls, TurnHooks)):
        raise ValueError(f"--hooks {spec}: {class_name} is not a TurnHooks subclass")
    try:
        return cls()
    except Exception as e:
        raise ValueError(f"--hooks {spec}: {class_name}() raised {type(e).__name__}: {e}") from e


def load_tools(modules: list[str]) -> ToolRegistry:
    registry = ToolRegistry()
    registry.load_module("durable_turns.demo_tools")
    for module in modules:
        _user_import("--tools", _module_name(module), registry.load_module)
    return registry


_LOADED_TRANSFORMS: set[str] = set()


def load_user_transforms(modules: list[str]) -> None:
    """Import each ``--transforms`` module once (their transforms register themselves)."""
    for module in modules:
        name = _module_name(module)
        if name not in _LOADED_TRANSFORMS:
            _user_import("--transforms", name, load_transforms)
            _LOADED_TRANSFORMS.add(name)
