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

The same holds for any later patch: ask it before the run's first local activity, or with an
up-front id of its own (:data:`APPLIED` is closed).
"""

from __future__ import annotations

from temporalio import workflow

UP_FRONT = "patches-decided-up-front"
"""The patches of :data:`APPLIED` are applied in this run; recorded in its first workflow task."""

APPLIED = frozenset(
    {
        "activity-attempt-budgets",
        "chat-response-crash-budget",
        "conversation-continue-as-new-with-queue",
        "conversation-forward-tool-results-one-at-a-time",
        "conversation-id-search-attribute",
        "conversation-opens-with-worker-defaults",
        "conversation-request-metadata",
        "conversation-requests-sized-as-kept",
        "conversation-signals-through-inbox",
        "death-budgets",
        "intake-rounds-of-256k",
        "local-begin-finish",
        "local-open-conversation",
        "subagent-client-tools",
        "turn-client-answers-in-batches",
        "turn-tool-results-through-inbox",
    }
)
"""Every patch of the workflows when :data:`UP_FRONT` was made. Never add to it: a run recorded
with ``UP_FRONT`` took none of a later patch's branches. A later patch is asked on its own
(:func:`patched` falls through to ``workflow.patched``), where no local activity comes before it
in its workflow task, or by a new up-front id with a set of its own."""

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
    """``workflow.patched(patch_id)``, unless the run applies it up front (:data:`APPLIED`)."""
    return (patch_id in APPLIED and decide()) or workflow.patched(patch_id)
