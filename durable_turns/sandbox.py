"""How the worker runs its workflows: plain, or in temporalio's sandbox made cheap.

The engine's workflows (``ConversationWorkflow``, ``TurnWorkflow``) are its own code: user
code (hooks, tools, transforms) runs in activities, never in a workflow. By default
(``TURNS_WORKFLOW_SANDBOX=off``) they run as plain code, :class:`LeanUnsandboxedWorkflowRunner`:
no re-import of the workflow module for every run and no ``exec`` per activation, which is
most of what the sandbox costs a turn (measured by ``python -m bench.contract_floor``: 1.4
to 5.4 ms of worker CPU on a 1-step next turn, up to a fifth of it). Their determinism is checked where it
matters for turns in flight: every recorded history replays under both runners
(``tests/test_replay.py``), and a worker with ``TURNS_WORKFLOW_SANDBOX=on`` runs them in the
sandbox, whose restrictions catch a non-deterministic call as it runs.

In the sandbox (its restrictions guard determinism), what follows keeps what it costs per
turn small without loosening it:

* :data:`PASSTHROUGH`: modules the sandbox shares with the worker instead of re-importing
  for every run: pydantic (models cross the boundary as instances), the wire contract (pure
  data) and the workflows' stateless helpers. Never the modules that define workflows:
  those are re-imported under the sandbox's restrictions for every run.
* :func:`precompile_workflow_modules`: the bytecode of the modules re-imported per run.
* :class:`LeanSandboxedWorkflowRunner`: temporalio (1.35) asks a sandboxed workflow which
  serialization context applies to *each payload* of every activation and completion, and
  each question enters the sandbox (an ``exec`` under the import hooks, about 170 µs on these
  machines). The answer is pure data (the workflow's id, or the pending activity's or
  child's ids), so this runner asks the workflow's instance directly. Measured on a 1-step
  turn: 59 such questions, ~10 ms of worker CPU, all of it on the turn's critical path.
  Workflow code itself still runs inside the sandbox, exactly as before.
* :func:`compiled`: the sandbox enters itself by ``exec`` of a few lines of source (the
  workflow's import when a run starts, then one line per activation), compiling them every
  time: ~150 µs of worker CPU a call here, about ten calls per 1-step turn. The runner hands
  it each snippet compiled once per process instead; what runs is the same code.

Either way, before a workflow sees an activation, each burst of one signal is folded into one job
(:mod:`durable_turns.signal_fold`): the SDK's cost per signal, paid once per burst, for the
signals a workflow names as foldable.

Every activation is timed, and one that runs longer than ``slow_activation_s`` is logged with
its workflow and jobs: Temporal's deadlock detector fails a task whose activation passes 2 s,
so this is the early warning (and what ``bench.intake`` reads).

The runner relies on private details of temporalio's sandbox (its per-run instance class, the
name under which that keeps the sandboxed workflow, and ``_run_code``, which ``exec``s what it
is given); where a release changes them, each question goes the stock way again: the same
answers, only slower.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import py_compile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import SerializationContext
from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from durable_turns.signal_fold import fold_signals
from durable_turns.update_guard import answerable_bytes, drop_unanswerable_updates
from durable_turns.workflows.intake import FOLDABLE_LIVE, FOLDABLE_SIGNALS

PASSTHROUGH = [
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "durable_turns.contract",
    "durable_turns.messages",
    "durable_turns.workflows.options",
    "durable_turns.workflows.intake",
    "durable_turns.workflows.recovery",
    "durable_turns.workflows.subagent",
]

log = logging.getLogger("durable_turns.sandbox")

SLOW_ACTIVATION_S = 0.5
"""The default of ``slow_activation_s``: a quarter of the deadlock detector's 2 s."""


def _timed_activation(
    activate: Any, act: WorkflowActivation, label: str, slow_s: float
) -> WorkflowActivationCompletion:
    started = time.perf_counter()
    completion: WorkflowActivationCompletion = activate(act)
    took = time.perf_counter() - started
    if took >= slow_s:
        log.warning(
            "slow activation: %.1f ms (%s, run %s, %d jobs; the deadlock detector fails a task"
            " at 2000 ms)",
            took * 1000,
            label,
            act.run_id,
            len(act.jobs),
        )
    return completion


_IN_SANDBOX = "__temporal_in_sandbox"
"""Where temporalio's sandbox keeps the sandboxed instance (``_in_sandbox.InSandbox``; its
``instance._object`` is the workflow object)."""

_COMPILED: dict[str, CodeType] = {}
"""The sandbox's own snippets, compiled once: a fixed few, plus one import line per workflow
class (its module and name), so the cache stays this small (bounded by :data:`MAX_COMPILED`)."""

MAX_COMPILED = 256
"""Past this many snippets (a temporalio release that puts data in them, say), compile each
time again rather than keep more."""


def compiled(code: str | CodeType) -> CodeType | str:
    """``code`` compiled once per process (a code object is passed on as it is)."""
    if not isinstance(code, str):
        return code
    found = _COMPILED.get(code)
    if found is None:
        if len(_COMPILED) >= MAX_COMPILED:
            return code
        found = _COMPILED[code] = compile(code, "<string>", "exec")
    return found


try:  # private: the stock sandbox's per-run instance class
    from temporalio.worker.workflow_sandbox._runner import _Instance as _StockInstance
except ImportError:  # pragma: no cover - a temporalio release without it
    _StockInstance = None  # type: ignore[assignment,misc]


if _StockInstance is not None:

    class _LeanInstance(_StockInstance):
        """The stock sandboxed instance, asked for serialization contexts directly, running
        its snippets compiled once; updates too large to answer never reach it."""

        update_limit: int = answerable_bytes(None)
        slow_s: float = SLOW_ACTIVATION_S
        label: str = ""
        live_foldable: frozenset[str] = frozenset()

        def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
            drop_unanswerable_updates(act, self.update_limit)
            return _timed_activation(self._folded_activate, act, self.label, self.slow_s)

        def _folded_activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
            workflow_object = getattr(getattr(self._sandboxed(), "instance", None), "_object", None)
            foldable = getattr(workflow_object, FOLDABLE_SIGNALS, None)
            if foldable is None:  # the run does not know yet: only what a live activation may
                foldable = () if act.is_replaying else self.live_foldable
            if foldable and len(act.jobs) > 1:
                fold_signals(act, foldable)
            return super().activate(act)

        def _run_code(self, code: Any, **extra_globals: Any) -> None:
            # typed str, but it only passes ``code`` to exec, which takes a code object too
            super()._run_code(compiled(code), **extra_globals)  # type: ignore[arg-type]

        def _sandboxed(self) -> Any:
            return getattr(self, "globals_and_locals", {}).get(_IN_SANDBOX)

        def get_serialization_context(self, command_info: Any) -> SerializationContext | None:
            inner = self._sandboxed()
            if inner is None:  # pragma: no cover - not yet created, or a changed sandbox
                return super().get_serialization_context(command_info)
            result: SerializationContext | None = inner.get_serialization_context(command_info)
            return result

        def get_external_store_context(self, command_info: Any) -> Any:
            inner = self._sandboxed()
            if inner is None:  # pragma: no cover
                return super().get_external_store_context(command_info)
            return inner.get_external_store_context(command_info)


class _Guarded(WorkflowInstance):
    """Any other instance, with the updates too large to answer taken out of its activations
    (the stock sandbox's, should a temporalio release lack the class the lean one extends)."""

    def __init__(
        self, inner: WorkflowInstance, update_limit: int, label: str, slow_s: float
    ) -> None:
        self._inner = inner
        self._update_limit = update_limit
        self._label = label
        self._slow_s = slow_s

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        drop_unanswerable_updates(act, self._update_limit)
        return _timed_activation(self._run, act, self._label, self._slow_s)

    def _run(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        """The inner instance's activation (what :meth:`activate` guards and times)."""
        completion: WorkflowActivationCompletion = self._inner.activate(act)
        return completion

    def get_serialization_context(self, command_info: Any) -> SerializationContext | None:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> Any:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Plain(_Guarded):
    """An engine workflow run outside the sandbox (``TURNS_WORKFLOW_SANDBOX=off``): the same
    guards as the lean sandboxed instance (updates too large to answer taken out, bursts of
    one signal folded, each activation timed), around temporalio's own instance, which runs
    the workflow's code as it is, with no ``exec`` and no re-import per run."""

    def __init__(
        self, inner: Any, update_limit: int, label: str, slow_s: float, live: frozenset[str]
    ) -> None:
        super().__init__(inner, update_limit, label, slow_s)
        self._live = live

    def _run(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        foldable = getattr(getattr(self._inner, "_object", None), FOLDABLE_SIGNALS, None)
        if foldable is None:
            foldable = () if act.is_replaying else self._live
        if foldable and len(act.jobs) > 1:
            fold_signals(act, foldable)
        return super()._run(act)


class LeanUnsandboxedWorkflowRunner(UnsandboxedWorkflowRunner):
    """The engine's own workflows outside the sandbox, with the lean runner's guards.

    Only for workflows whose code is the engine's (``ConversationWorkflow``,
    ``TurnWorkflow``: user code runs in activities, never in a workflow), whose determinism
    the recorded histories check on every change (``tests/test_replay.py`` replays them under
    this runner and under the sandbox). What it saves per turn is the sandbox's cost: the
    workflow module's import for every run and an ``exec`` per activation."""

    def __init__(self, update_limit: int, slow_activation_s: float = SLOW_ACTIVATION_S) -> None:
        super().__init__()
        self.update_limit = update_limit
        self.slow_activation_s = slow_activation_s

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        label = f"{det.info.workflow_type} {det.info.workflow_id}"
        return _Plain(
            super().create_instance(det),
            self.update_limit,
            label,
            self.slow_activation_s,
            frozenset(getattr(det.defn.cls, FOLDABLE_LIVE, ())),
        )


@dataclass(frozen=True)
class LeanSandboxedWorkflowRunner(SandboxedWorkflowRunner):
    """:class:`SandboxedWorkflowRunner` whose per-payload questions skip the sandbox's exec,
    and whose instances never see an update too large to answer (``durable_turns.update_guard``:
    ``update_limit`` bytes, from the namespace's blob size limit)."""

    update_limit: int = field(default_factory=lambda: answerable_bytes(None))
    slow_activation_s: float = SLOW_ACTIVATION_S

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        label = f"{det.info.workflow_type} {det.info.workflow_id}"
        if _StockInstance is None:  # pragma: no cover
            return _Guarded(
                super().create_instance(det), self.update_limit, label, self.slow_activation_s
            )
        instance = _LeanInstance(det, self.runner_class, self.restrictions)
        instance.update_limit = self.update_limit
        instance.slow_s = self.slow_activation_s
        instance.label = label
        instance.live_foldable = frozenset(getattr(det.defn.cls, FOLDABLE_LIVE, ()))
        return instance


def workflow_runner(
    workflow_modules: Iterable[str] = (),
    blob_limit: int | None = None,
    slow_activation_s: float = SLOW_ACTIVATION_S,
    sandboxed: bool = True,
) -> WorkflowRunner:
    """The runner the worker uses: :func:`sandbox_runner`, or with ``sandboxed`` False
    (``TURNS_WORKFLOW_SANDBOX=off``) :class:`LeanUnsandboxedWorkflowRunner`."""
    if sandboxed:
        return sandbox_runner(workflow_modules, blob_limit, slow_activation_s)
    return LeanUnsandboxedWorkflowRunner(answerable_bytes(blob_limit), slow_activation_s)


def sandbox_runner(
    workflow_modules: Iterable[str] = (),
    blob_limit: int | None = None,
    slow_activation_s: float = SLOW_ACTIVATION_S,
) -> SandboxedWorkflowRunner:
    """The sandboxed runner the worker (and the replayer) use; compiles ``workflow_modules``
    first. ``blob_limit``: the namespace's blob size limit (None: Temporal's default, 2 MiB);
    ``slow_activation_s``: activations that run longer are logged."""
    precompile_workflow_modules(workflow_modules)
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    return LeanSandboxedWorkflowRunner(
        restrictions=restrictions,
        update_limit=answerable_bytes(blob_limit),
        slow_activation_s=slow_activation_s,
    )


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
