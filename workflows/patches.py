"""Patch decisions taken once, at a run's first activation, so a replay always takes them alike.

``workflow.patched(id)`` answers from the *workflow task* being replayed: on replay it is true
only if the task's own commands hold the marker. A local activity breaks that: its result is
recorded as a marker in the task that completed while it ran, and the code that follows it ran
in the next task when the result arrived just as the worker heartbeated its task (a long local
activity, a loaded machine). A replay then resolves the local activity from its marker *inside
the first task*, runs on, and asks ``patched`` a task too early: false, the old branch, and a
``[TMPRL1100] Non-deprecated patch marker encountered … but there is no corresponding change
command`` that fails every task of the run after a worker death (seen in a test of a worker
killed mid-stream, the model step's ``activity-attempt-budgets`` asked right after
``begin_turn``).

So a run started by this release asks one patch, :data:`UP_FRONT`, in its first activation
(:func:`decide`, the first thing each workflow's ``run`` does, before any local activity), and
every later :func:`patched` is then true without a marker of its own: one marker per run, in the
task that started it, whatever the timing. A run recorded before has no ``UP_FRONT`` marker and
asks each patch where it always did, exactly as it ran.
"""

from __future__ import annotations

from temporalio import workflow

UP_FRONT = "patches-decided-up-front"
"""Every patch below is applied in this run; recorded in the run's first workflow task."""

_DECIDED = "_durable_turns_patches_up_front"


def decide() -> bool:
    """Ask :data:`UP_FRONT` once per run (memoized on the workflow instance); call it in the
    run's first activation, before anything can await a local activity."""
    instance = workflow.instance()
    decided: bool | None = getattr(instance, _DECIDED, None)
    if decided is None:
        decided = workflow.patched(UP_FRONT)
        setattr(instance, _DECIDED, decided)
    return decided


def patched(patch_id: str) -> bool:
    """``workflow.patched(patch_id)``, unless this run applies every patch (:data:`UP_FRONT`)."""
    return decide() or workflow.patched(patch_id)
