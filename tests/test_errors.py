"""One errors module, one base: every exception the package defines derives from
``DurableTurnsError``, keeps its built-in base, and is still importable where it used to be."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import durable_turns
from durable_turns import errors
from durable_turns.errors import DurableTurnsError

ROOT = Path(__file__).resolve().parent.parent


def package_modules() -> list[str]:
    """Every module of the package (the workflows, activities and hooks folders included)."""
    names = ["durable_turns"]
    for info in pkgutil.walk_packages(durable_turns.__path__, "durable_turns."):
        names.append(info.name)
    return names


def defined_exceptions() -> dict[str, type[BaseException]]:
    """``module:Name`` of every exception class defined (not merely imported) in the package."""
    found: dict[str, type[BaseException]] = {}
    for name in package_modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{value.__module__}:{value.__qualname__}"] = value
    return found


def test_the_walk_sees_the_whole_package() -> None:
    modules = package_modules()
    # the three folders mapped into the namespace are walked too
    for name in (
        "durable_turns.workflows.turn",
        "durable_turns.activities.finish",
        "durable_turns.hooks.types",
        "durable_turns.web.app",
        "durable_turns.store.sqlite",
    ):
        assert name in modules
    assert len(defined_exceptions()) >= 28


def test_every_exception_in_the_package_derives_from_durable_turns_error() -> None:
    strays = [
        where
        for where, cls in defined_exceptions().items()
        if cls is not DurableTurnsError and not issubclass(cls, DurableTurnsError)
    ]
    assert strays == []


def test_every_public_exception_is_defined_in_the_errors_module() -> None:
    outside = [
        where
        for where, cls in defined_exceptions().items()
        if cls.__module__ != "durable_turns.errors" and not cls.__name__.startswith("_")
    ]
    # the CLI's own input error stays beside the CLI's parser
    assert outside == ["durable_turns.cli:InvalidInput"]


BUILT_IN_BASES = {
    "InvalidId": ValueError,
    "InvalidMetadata": ValueError,
    "UnknownTransform": ValueError,
    "NothingToRegenerate": ValueError,
    "KeyConfigError": ValueError,
    "ServerStartError": RuntimeError,
}


@pytest.mark.parametrize(("name", "base"), sorted(BUILT_IN_BASES.items()))
def test_bad_input_errors_keep_their_built_in_base(name: str, base: type[Exception]) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, base)
    assert issubclass(cls, DurableTurnsError)


def test_a_bad_id_is_caught_by_either_base() -> None:
    from durable_turns.contract import check_conversation_id

    with pytest.raises(ValueError, match="conversation id"):
        check_conversation_id("")
    with pytest.raises(DurableTurnsError):
        check_conversation_id("a\x00b")


OLD_HOMES = {
    "durable_turns.codec": ["CodecError", "KeyConfigError", "UnknownKeyError", "DecryptionError"],
    "durable_turns.contract": ["InvalidMetadata", "InvalidId"],
    "durable_turns.demo": ["DemoError"],
    "durable_turns.devserver": ["ServerStartError"],
    "durable_turns.mcp": ["McpServerUnavailable", "McpError", "McpProtocolError"],
    "durable_turns.tools": ["ToolFailed"],
    "durable_turns.transforms": ["UnknownTransform"],
    "durable_turns.models": ["ProviderError"],
    "durable_turns.models.base": ["ProviderError", "ErrorKind", "MAX_PROVIDER_MESSAGE_CHARS"],
    "durable_turns.store": ["StoreUnavailable", "TurnNotOwned"],
    "durable_turns.store.base": ["StoreUnavailable", "TurnNotOwned"],
    "durable_turns.streams": ["StreamUnavailable"],
    "durable_turns.streams.base": ["StreamNotOwned", "StreamUnavailable"],
    "durable_turns.web.requests": ["BadRequest"],
    "durable_turns.web.auth": ["Unauthorized"],
    "durable_turns.workflows.intake": ["Rejected"],
    "durable_turns.workflows.recovery": ["Stopped"],
    "durable_turns.activities.streaming": ["StreamStalled"],
    "durable_turns.activities.regenerate": ["NothingToRegenerate"],
}


@pytest.mark.parametrize("module", sorted(OLD_HOMES))
def test_every_old_import_path_gives_the_same_class(module: str) -> None:
    old = importlib.import_module(module)
    for name in OLD_HOMES[module]:
        assert getattr(old, name) is getattr(errors, name), f"{module}.{name}"


def test_the_base_is_exported_from_the_top() -> None:
    assert "DurableTurnsError" in durable_turns.__all__
    assert durable_turns.DurableTurnsError is DurableTurnsError


def test_the_errors_module_loads_nothing_of_the_package() -> None:
    """Import-light, so the workflow sandbox (and every module) may import it."""
    code = (
        "import sys, durable_turns.errors\n"
        "print(sorted(m for m in sys.modules if m.startswith('durable_turns')))\n"
        "print(sorted(m for m in ('pydantic', 'temporalio', 'anthropic', 'openai')"
        " if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['durable_turns', 'durable_turns.errors']", "[]"]


def test_a_provider_error_is_still_redacted_and_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-ant-" + "k3y" * 12
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    error = errors.ProviderError(f"bad key {key} " + "x" * 9000, kind="auth", status=401)
    assert key not in str(error) and key[:20] not in str(error)
    assert len(str(error)) == errors.MAX_PROVIDER_MESSAGE_CHARS
    assert (error.kind, error.status, error.retryable) == ("auth", 401, False)
