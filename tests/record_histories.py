"""Record workflow histories for the replay test: ``python -m tests.record_histories [NAME]``.

Starts a dev server and a worker, runs ``tests.test_replay.record`` and writes the
conversation's and its turns' histories to ``tests/histories/NAME*.json``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from durable_turns.contract import SEARCH_ATTRIBUTES
from durable_turns.devserver import temporal_binary
from tests.support.harness import Harness
from tests.test_replay import HISTORIES, record


async def main(name: str) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_ATTRIBUTES,
    )
    try:
        harness = Harness(
            env.client, env.client.service_client.config.target_host, Path(tempfile.mkdtemp())
        )
        harness.start_worker()
        for history in await record(harness, name):
            path = HISTORIES / f"{history.workflow_id.replace('/', '__')}.json"
            path.write_text(json.dumps(history.to_json_dict()))
            print(f"wrote {path}")
        await harness.close()
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "recorded"))
