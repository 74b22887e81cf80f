"""Which runner runs the engine's workflows, beside whatever runs a team's own.

The engine's workflows (``ConversationWorkflow``, ``TurnWorkflow``) are its own code: user
code (hooks, tools, transforms) runs in activities, never in a workflow. By default
(``TURNS_WORKFLOW_SANDBOX=off``) they run as plain code, in the SDK's public
:class:`~temporalio.worker.UnsandboxedWorkflowRunner`: no re-import of the workflow modules
for every run and no ``exec`` per activation, which is what the sandbox costs a turn
(``docs/architecture.md`` has the figures, measured by ``python -m bench.contract_floor``).
What keeps them deterministic there is checked by construction instead: a lint of the
workflow modules (``tests/test_workflow_lint.py``), every recorded history replayed under both
runners (``tests/test_replay.py``) and CI running the workflow tests with the sandbox on.

With ``TURNS_WORKFLOW_SANDBOX=on`` they run in the SDK's
:class:`~temporalio.worker.workflow_sandbox.SandboxedWorkflowRunner`, whose restrictions catch
a non-deterministic call as it runs, sharing :data:`PASSTHROUGH` with the worker.

:class:`EngineWorkflowRunner` is the worker's ``workflow_runner``: it hands the engine's two
workflows to one of those two and every other workflow to the runner the worker had (a team's
own, the SDK's sandbox by default), untouched. It creates the stock runners' own instances and
never sees an activation.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import py_compile
from collections.abc import Iterable, Sequence
from typing import Any

from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

PASSTHROUGH = {
    "pydantic": "models cross into the sandbox as instances; re-imported, every class differs",
    "pydantic_core": "pydantic's compiled core: a C extension cannot be imported twice",
    "annotated_types": "pydantic's constraint types, shared with the models that use them",
    "durable_turns.contract": "the wire contract: pure data (models, names, limits), no I/O",
    "durable_turns.messages": "message models: pure data, shared with the contract",
    "durable_turns.workflows.options": "pure functions of a turn's options (timeouts, retries)",
    "durable_turns.workflows.intake": "the inbox and payload checks: pure, no clock or I/O",
    "durable_turns.workflows.recovery": "pure functions deciding a step's retry from its failure",
    "durable_turns.workflows.subagent": "pure helpers the turn calls to run agent tools",
    "durable_turns.workflows.conversation_machine": "the conversation's decisions: no SDK, "
    "clock or I/O (its clock and ids come in as arguments)",
    "durable_turns.errors": "the engine's exception classes: plain classes, no I/O at import",
}
"""Modules the sandbox shares with the worker instead of re-importing for every run, each with
why that is safe. Never the modules that define workflows (``conversation``, ``turn``): those
are re-imported under the sandbox's restrictions for every run."""


def engine_sandbox() -> SandboxedWorkflowRunner:
    """The SDK's sandboxed runner with the default restrictions and :data:`PASSTHROUGH`."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    return SandboxedWorkflowRunner(restrictions=restrictions)


class EngineWorkflowRunner(WorkflowRunner):
    """Runs ``engine`` workflow classes plain (or, ``sandboxed``, in :func:`engine_sandbox`)
    and every other workflow in ``other``, the runner the worker would have used."""

    def __init__(
        self, engine: Iterable[type], other: WorkflowRunner | None, sandboxed: bool
    ) -> None:
        self.engine = frozenset(engine)
        self.sandboxed = sandboxed
        self.own: WorkflowRunner = engine_sandbox() if sandboxed else UnsandboxedWorkflowRunner()
        self.other: WorkflowRunner = other if other is not None else SandboxedWorkflowRunner()

    def _for(self, cls: type) -> WorkflowRunner:
        return self.own if cls in self.engine else self.other

    def prepare_workflow(self, defn: Any) -> None:
        self._for(defn.cls).prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return self._for(det.defn.cls).create_instance(det)

    def set_worker_level_failure_exception_types(
        self, types: Sequence[type[BaseException]]
    ) -> None:
        self.own.set_worker_level_failure_exception_types(types)
        self.other.set_worker_level_failure_exception_types(types)


def precompile_workflow_modules(workflow_modules: Iterable[str] = ()) -> int:
    """Write the bytecode of the modules the sandbox re-imports for every workflow run.

    The sandbox imports the workflow modules afresh for each workflow it runs; without a
    ``.pyc`` (``PYTHONDONTWRITEBYTECODE`` set, or an editable install) that means compiling
    their source every time, about a millisecond of worker CPU per module and run. Compiled
    once here, imports read the cache. Best effort: a read-only package (a wheel installed
    by pip already has its bytecode) is left as it is. Returns how many modules it wrote."""
    written = 0
    modules = {
        "durable_turns",
        "durable_turns.workflows",
        *workflow_modules,
        *(m for m in PASSTHROUGH if m.startswith("durable_turns.")),
    }
    for module in sorted(modules):
        spec = importlib.util.find_spec(module)
        source = spec.origin if spec else None
        if not source or not source.endswith(".py"):
            continue
        cached = importlib.util.cache_from_source(source)
        try:
            if os.path.getmtime(cached) >= os.path.getmtime(source):
                continue
        except OSError:
            pass
        with contextlib.suppress(OSError, py_compile.PyCompileError):
            py_compile.compile(source, cfile=cached, doraise=True)
            written += 1
    return written
