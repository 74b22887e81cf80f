"""The runner's signal folding (``durable_turns.signal_fold``) on activations built by hand: what
is folded, what is left as it came, and that order and payloads survive."""

from __future__ import annotations

from temporalio.bridge.proto.workflow_activation import WorkflowActivation

from durable_turns.signal_fold import fold_signals
from durable_turns.workflows.intake import FOLD_PREFIX, unfold


def _activation(*jobs: tuple[str, ...]) -> WorkflowActivation:
    act = WorkflowActivation()
    for n, (kind, *rest) in enumerate(jobs):
        job = act.jobs.add()
        if kind == "signal":
            name, *flags = rest
            job.signal_workflow.signal_name = name
            if "no-arg" not in flags:
                job.signal_workflow.input.add().data = f"{n}".encode()
            if "two-args" in flags:
                job.signal_workflow.input.add().data = b"second"
            if "headers" in flags:
                job.signal_workflow.headers["traceparent"].data = b"x"
        elif kind == "update":
            job.do_update.name = rest[0]
        else:
            job.resolve_activity.seq = n
    return act


def _shape(act: WorkflowActivation) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for job in act.jobs:
        kind = job.WhichOneof("variant")
        if kind == "signal_workflow":
            s = job.signal_workflow
            out.append((s.signal_name, *(p.data.decode() for p in s.input)))
        elif kind == "do_update":
            out.append(("update", job.do_update.name))
        else:
            out.append((kind or "",))
    return out


def test_a_run_of_one_signal_becomes_one_job_with_its_payloads_in_order() -> None:
    act = _activation(*[("signal", "a")] * 4)
    assert fold_signals(act, {"a"}) == 3
    assert _shape(act) == [(FOLD_PREFIX + "a", "0", "1", "2", "3")]
    assert unfold(act.jobs[0].signal_workflow.signal_name) == "a"


def test_other_jobs_names_headers_and_arguments_end_a_run() -> None:
    act = _activation(
        ("signal", "a"),
        ("signal", "a"),
        ("update", "u"),  # an update sees the signals before it, none after
        ("signal", "a"),
        ("signal", "a", "no-arg"),  # no argument: an empty payload, read as none
        ("signal", "b"),  # another name
        ("signal", "a"),
        ("signal", "a", "headers"),  # an interceptor's headers: left as it came
        ("signal", "a"),
        ("signal", "a", "two-args"),  # not one argument: left as it came
        ("activity",),
        ("signal", "a"),
        ("signal", "c"),  # not foldable
        ("signal", "c"),
    )
    assert fold_signals(act, {"a", "b"}) == 2
    assert _shape(act) == [
        (FOLD_PREFIX + "a", "0", "1"),
        ("update", "u"),
        (FOLD_PREFIX + "a", "3", ""),
        ("b", "5"),
        ("a", "6"),
        ("a", "7"),
        ("a", "8"),
        ("a", "9", "second"),
        ("resolve_activity",),
        ("a", "11"),
        ("c", "12"),
        ("c", "13"),
    ]


def test_nothing_foldable_leaves_the_activation_as_it_came() -> None:
    act = _activation(("signal", "a"), ("signal", "a"))
    before = act.SerializeToString()
    assert fold_signals(act, ()) == 0
    assert act.SerializeToString() == before
    assert unfold("a") is None
