"""``bench.faults``'s command line: the pace of its faults, from ``--every`` or the defaults."""

from __future__ import annotations

import pytest

from bench import faults


def pace(*argv: str) -> tuple[float, float]:
    args = faults.parse_args(list(argv))
    return args.every_min, args.every_max


def test_every_sets_the_pace_with_and_without_the_network_faults() -> None:
    assert pace("--no-network", "--workers", "4", "--every", "1.2", "2.4") == (1.2, 2.4)
    assert pace("--every", "2", "1") == (1.0, 2.0)


def test_without_every_the_pace_follows_the_kind_of_run() -> None:
    assert pace() == (0.5, 1.2)
    assert pace("--no-network") == (3.0, 9.0)
    assert pace("--no-network", "--quick") == (3.0, 6.0)


@pytest.mark.parametrize("argv", [["--workers", "1"], ["--every", "0", "1"]])
def test_a_run_that_could_not_keep_its_promises_is_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        faults.parse_args(argv)
