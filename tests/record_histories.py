"""Record workflow histories for the replay test: ``python -m tests.record_histories [NAME]
[subagents]``.

Starts a dev server and a worker, runs ``tests.test_replay.record`` and writes the
conversation's and its turns' histories to ``tests/histories/NAME*.json``; with
``subagents``, ``tests.test_subagents.record_subagents`` into ``tests/histories/subagents``
(``subagents-client``: ``record_subagent_client``, a sub-agent's client tool, there too).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from durable_turns.contract import SEARCH_ATTRIBUTES
from durable_turns.devserver import temporal_binary
from tests.support.harness import Harness
from tests.test_replay import HISTORIES, REPLAY_WORKER, record
from tests.test_subagents import (
    SUBAGENT_HISTORIES,
    SUBAGENT_WORKER,
    record_subagent_client,
    record_subagents,
)

ROOT = Path(__file__).resolve().parents[1]


def _portable(value: Any, key: str = "") -> Any:
    """The history without this machine's paths (stack traces, script files), payloads too."""
    if isinstance(value, dict):
        return {k: _portable(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable(v, key) for v in value]
    if not isinstance(value, str):
        return value
    if key == "data":  # a payload: base64 of JSON
        try:
            text = base64.b64decode(value, validate=True).decode()
        except ValueError:
            return value
        cleaned = _strip_paths(text)
        return value if cleaned == text else base64.b64encode(cleaned.encode()).decode()
    return _strip_paths(value)


def _strip_paths(text: str) -> str:
    text = text.replace(f"{ROOT}/", "")
    text = text.replace(f"{sysconfig.get_paths()['purelib']}/", "site-packages/")
    text = text.replace(f"{sysconfig.get_paths()['stdlib']}/", "python/")  # stack traces
    text = text.replace(f"{sys.prefix}/", "python/")
    return re.sub(r"/tmp/tmp\w+/", "scripts/", text)


RECORDERS = {
    "turns": (record, REPLAY_WORKER, HISTORIES),
    "subagents": (record_subagents, SUBAGENT_WORKER, SUBAGENT_HISTORIES),
    "subagents-client": (record_subagent_client, SUBAGENT_WORKER, SUBAGENT_HISTORIES),
}


async def main(name: str, kind: str = "turns") -> None:
    recorder, worker, folder = RECORDERS[kind]
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_ATTRIBUTES,
    )
    try:
        harness = Harness(
            env.client, env.client.service_client.config.target_host, Path(tempfile.mkdtemp())
        )
        harness.start_worker(**worker)
        folder.mkdir(exist_ok=True)
        for history in await recorder(harness, name):
            path = folder / f"{history.workflow_id.replace('/', '__')}.json"
            path.write_text(json.dumps(_portable(history.to_json_dict())))
            print(f"wrote {path}")
        await harness.close()
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main(*(sys.argv[1:] or ["recorded"])))
