"""The engine as a temporalio plugin (issue 35, item 2): a team's own worker runs the engine's
workflows beside its own with ``plugins=[DurableTurnsPlugin(settings)]``, a ``Replayer`` with
the plugin replays what it recorded, and the complete example of docs/deployment.md runs as
written."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.worker import Replayer, Worker

from durable_turns import DurableTurnsPlugin, Settings, TurnsClient
from durable_turns.codec import data_converter_from_env
from tests.support.team_workflows import TeamGreeting, team_greet

ROOT = Path(__file__).resolve().parents[1]


def _settings(tmp_path: Path, queue: str) -> Settings:
    return dataclasses.replace(Settings.from_env(), data_dir=tmp_path, task_queue=queue)


async def test_a_teams_worker_runs_its_own_workflow_and_the_engines(
    client: Client, tmp_path: Path
) -> None:
    """One worker, the team's workflow and activity beside the engine's: both run, the team's
    in the SDK's sandbox (its runner, untouched), and a ``Replayer`` given the plugin replays
    the histories of the conversation, its turn and the team's workflow."""
    queue = f"team-{uuid.uuid4().hex[:8]}"
    plugin = DurableTurnsPlugin(_settings(tmp_path, queue))
    team = Client(client.service_client, namespace=client.namespace, plugins=[plugin])
    async with Worker(team, task_queue=queue, workflows=[TeamGreeting], activities=[team_greet]):
        greeting = await team.execute_workflow(
            TeamGreeting.run, "ops", id=f"{queue}-greeting", task_queue=queue
        )
        result = await TurnsClient(team, queue).send(f"{queue}-chat", "hi", model="demo:echo")
    assert greeting == ("hello, ops", True)
    assert result.status == "completed" and result.turn_number == 1 and result.text
    histories = [
        await team.get_workflow_handle(workflow_id).fetch_history()
        for workflow_id in (f"{queue}-chat", f"{queue}-chat/turn-1", f"{queue}-greeting")
    ]
    replayer = Replayer(workflows=[TeamGreeting], plugins=[plugin])
    for history in histories:
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, (history.workflow_id, replayed.replay_failure)


async def test_a_plugin_on_a_worker_whose_client_lacks_it_is_refused(
    client: Client, tmp_path: Path
) -> None:
    """The worker uses its client's data converter: a client without the plugin (the SDK's
    default converter) cannot carry the engine's models, and the worker says so at once."""
    plain = Client(client.service_client, namespace=client.namespace)
    plugin = DurableTurnsPlugin(_settings(tmp_path, "nowhere"))
    with pytest.raises(ValueError, match=r"give the plugin to Client.connect"):
        Worker(plain, task_queue="nowhere", plugins=[plugin])


class _Codec(PayloadCodec):
    async def encode(self, payloads):  # type: ignore[no-untyped-def]
        return list(payloads)

    async def decode(self, payloads):  # type: ignore[no-untyped-def]
        return list(payloads)


def test_the_client_keeps_a_codec_of_its_own_and_refuses_two(tmp_path: Path) -> None:
    plugin = DurableTurnsPlugin(_settings(tmp_path, "q"))
    codec = _Codec()
    merged = plugin._data_converter(dataclasses.replace(DataConverter.default, payload_codec=codec))
    assert merged.payload_codec is codec
    assert merged.payload_converter_class is data_converter_from_env().payload_converter_class
    assert plugin._data_converter(None) is plugin._data_converter(DataConverter.default)
    keys = {"TURNS_ENCRYPTION_KEYS": "k1:" + "A" * 43 + "="}
    encrypting = DurableTurnsPlugin(_settings(tmp_path, "q"))
    encrypting._converter = data_converter_from_env(keys)
    with pytest.raises(ValueError, match="keep one of them"):
        encrypting._data_converter(dataclasses.replace(DataConverter.default, payload_codec=codec))


def deployment_example() -> str:
    text = (ROOT / "docs" / "deployment.md").read_text()
    section = text.split("## In your own worker", 1)[1]
    match = re.search(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert match, "docs/deployment.md has no example in its plugin section"
    return match.group(1)


def test_the_deployment_guides_example_runs_as_written(
    temporal_address: str, tmp_path: Path
) -> None:
    """docs/deployment.md's ``team_worker.py``, run as a script against the tests' server."""
    script = tmp_path / "team_worker.py"
    script.write_text(deployment_example())
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "PYTHONPATH": str(ROOT)}
    env.pop("TURNS_STORE_URL", None)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "order A-17: shipped", done.stdout
    assert lines[1].startswith("completed "), done.stdout
