"""A burst of signals folded into one job each: what a signal costs the SDK, paid once per run.

temporalio turns every signal of an activation into its own job, and each job into an asyncio
task that runs the handler: about 35 µs of the SDK's own work per signal on these machines,
while the engine's handlers do about 1.4 µs (they only put the payload in the inbox,
``workflows.intake``). 10,000 signals in one activation were 350 ms idle and 1.7 s with both
cores loaded, near Temporal's 2 s deadlock detector.

So before a workflow sees an activation, :func:`fold_signals` (run by the worker's sandbox
runner) rewrites each run of consecutive signals of one name into one signal job of the name
``FOLD_PREFIX + name`` that carries all their payloads, in order; the workflow's dynamic
signal handler hands each payload to the named signal's own work. Only what the workflow says
is foldable (:data:`durable_turns.workflows.intake.FOLDABLE_SIGNALS`, an attribute of the
workflow object) is folded: signals whose handler is synchronous, so that N handler calls in
one task do exactly what N tasks did (each ran to its end without a pause, one after the other,
before anything else of the activation ran), and a workflow names them only once it knows its
run takes signals through the inbox. A signal with headers (an interceptor's: tracing) or with
more than one argument is left as it is, and any other job ends a run (an update must see the
signals before it and none after; the rest keeps its place too).

Nothing of this is in the history: the server records each signal as it came, and a replay
folds or not as the replaying worker's runner does. Either way the workflow issues the same
commands, which is what replay checks.
"""

from __future__ import annotations

from collections.abc import Collection

from temporalio.api.common.v1 import Payload
from temporalio.bridge.proto.workflow_activation import WorkflowActivation

from durable_turns.workflows.intake import FOLD_PREFIX

MIN_RUN = 2
"""A run shorter than this is left as it is (one signal gains nothing)."""


def fold_signals(act: WorkflowActivation, foldable: Collection[str]) -> int:
    """Fold each run of consecutive signal jobs of one name in ``foldable`` into its first
    job (in place); returns how many jobs were taken out. Any other job ends a run."""
    jobs = act.jobs
    runs: list[tuple[int, int]] = []  # [begin, end) of each run
    begin, name = -1, ""
    for i, job in enumerate(jobs):
        this = None
        if job.WhichOneof("variant") == "signal_workflow":
            signal = job.signal_workflow
            if signal.signal_name in foldable and len(signal.input) <= 1 and not signal.headers:
                this = signal.signal_name
        if this is not None and begin >= 0 and this == name:
            continue
        if begin >= 0 and i - begin >= MIN_RUN:
            runs.append((begin, i))
        begin, name = (i, this) if this is not None else (-1, "")
    if begin >= 0 and len(jobs) - begin >= MIN_RUN:
        runs.append((begin, len(jobs)))
    taken = 0
    for begin, end in reversed(runs):  # from the end, so the earlier indices stay valid
        folded = jobs[begin].signal_workflow
        if not folded.input:
            folded.input.add()  # no argument: an empty payload, which the handlers read as none
        folded.input.extend(
            job.signal_workflow.input[0] if job.signal_workflow.input else Payload()
            for job in jobs[begin + 1 : end]
        )
        folded.signal_name = FOLD_PREFIX + folded.signal_name
        del jobs[begin + 1 : end]
        taken += end - begin - 1
    return taken
