"""Group commit (``streams.groups``): appends share a commit, spaced by ``interval_s``."""

from __future__ import annotations

import asyncio

import pytest

from durable_turns.streams.groups import AppendGroups, QueuedAppend


class _Recorder:
    """A ``CommitGroup`` that writes nothing: it records each group (its streams, when)."""

    def __init__(self) -> None:
        self.groups: list[tuple[list[str], float]] = []

    async def __call__(self, group: list[QueuedAppend]) -> list[int | Exception]:
        self.groups.append(([q.stream_id for q in group], asyncio.get_running_loop().time()))
        return [q.seq for q in group]


def _append(stream_id: str, seq: int = 1) -> QueuedAppend:
    return QueuedAppend(stream_id, "[]", 1, None, False, "w", seq)


async def test_appends_of_one_loop_turn_share_a_group() -> None:
    commit = _Recorder()
    groups = AppendGroups(commit)
    got = await asyncio.gather(*(groups.submit(_append(f"s{i}", i)) for i in range(5)))
    assert got == [0, 1, 2, 3, 4]
    assert [g for g, _ in commit.groups] == [["s0", "s1", "s2", "s3", "s4"]]


async def test_groups_are_spaced_by_the_interval_and_take_the_appends_made_meanwhile() -> None:
    commit = _Recorder()
    groups = AppendGroups(commit, interval_s=0.2)
    loop = asyncio.get_running_loop()
    await groups.submit(_append("a"))
    began = loop.time()
    second = groups.submit(_append("b"))  # within the interval: waits
    await asyncio.sleep(0.05)
    third = groups.submit(_append("c"))  # joins the waiting group
    await asyncio.gather(second, third)
    assert [g for g, _ in commit.groups] == [["a"], ["b", "c"]]
    assert commit.groups[1][1] - began >= 0.15, "the second group waited for the interval"
    assert loop.time() - began < 1


async def test_an_append_after_a_quiet_interval_goes_at_once() -> None:
    """One stream at a model's pace (appends further apart than the interval) never waits."""
    commit = _Recorder()
    groups = AppendGroups(commit, interval_s=0.1)
    loop = asyncio.get_running_loop()
    await groups.submit(_append("a"))
    await asyncio.sleep(0.15)
    asked = loop.time()
    await groups.submit(_append("a", 2))
    assert loop.time() - asked < 0.05


async def test_a_streams_own_appends_never_wait_for_the_interval() -> None:
    """One turn streaming alone (its chunks, then its boundaries at once) never waits: its
    publisher spaces its appends; the interval spaces the commits of different streams."""
    commit = _Recorder()
    groups = AppendGroups(commit, interval_s=10)
    for seq in range(1, 4):
        assert await asyncio.wait_for(groups.submit(_append("a", seq)), 1) == seq
    other = groups.submit(_append("b"))
    await asyncio.sleep(0.1)
    assert not other.done(), "another stream's append waits for the interval"
    other.cancel()
    assert [g for g, _ in commit.groups] == [["a"], ["a"], ["a"]]


async def test_a_group_cancelled_while_it_waits_fails_its_appends_and_the_next_goes_on() -> None:
    commit = _Recorder()
    groups = AppendGroups(commit, interval_s=10)
    await groups.submit(_append("a"))
    waiting = groups.submit(_append("b"))
    await asyncio.sleep(0.05)
    for task in list(groups._running):  # what the loop's shutdown does to it
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    groups.interval_s = 0
    assert await asyncio.wait_for(groups.submit(_append("c")), 5) == 1
    assert [g for g, _ in commit.groups] == [["a"], ["c"]]


def test_the_interval_is_not_negative() -> None:
    with pytest.raises(ValueError):
        AppendGroups(_Recorder(), interval_s=-1)
