"""``TURNS_MAX_CONCURRENT_ACTIVITIES``: the activity slots of an engine worker are a setting
(default 200, as before), and the worker runs with what it says."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_turns.config import Settings
from durable_turns.runtime import running_worker


def test_the_activity_slots_are_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNS_MAX_CONCURRENT_ACTIVITIES", raising=False)
    assert Settings.from_env().max_concurrent_activities == 200
    monkeypatch.setenv("TURNS_MAX_CONCURRENT_ACTIVITIES", "500")
    assert Settings.from_env().max_concurrent_activities == 500
    monkeypatch.setenv("TURNS_MAX_CONCURRENT_ACTIVITIES", "0")
    with pytest.raises(ValueError, match="TURNS_MAX_CONCURRENT_ACTIVITIES"):
        Settings.from_env()


async def test_a_worker_runs_with_the_slots_the_setting_says(
    client: Client, tmp_path: Path
) -> None:
    settings = dataclasses.replace(
        Settings.from_env(),
        task_queue=f"slots-{tmp_path.name}",
        store_url=f"sqlite:///{tmp_path}/t.db",
        data_dir=tmp_path / "data",
        max_concurrent_activities=7,
    )
    async with running_worker(client, settings) as worker:
        assert worker.config().get("max_concurrent_activities") == 7
