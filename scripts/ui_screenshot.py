#!/usr/bin/env python3
"""Screenshot a turn's history in the real Temporal UI (headless Chromium).

    .venv/bin/python scripts/ui_screenshot.py [--out docs/turn-history.png]

Starts an embedded dev server with its UI on free ports, runs a worker in-process and one
demo turn that calls a tool, opens the turn's history page in headless Chromium and saves a
PNG. Needs Chromium (`apt-get install chromium`).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from durable_turns import runtime  # noqa: E402
from durable_turns.client import TurnsClient  # noqa: E402
from durable_turns.config import Settings  # noqa: E402
from durable_turns.devserver import EmbeddedServer  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    sys.exit("Chromium is needed: apt-get install chromium")


def screenshot(url: str, out: Path, profile: str) -> None:
    subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--hide-scrollbars",
            "--window-size=1500,2300",
            "--virtual-time-budget=15000",
            f"--screenshot={out}",
            url,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


async def main(out: Path) -> None:
    data = Path(tempfile.mkdtemp(prefix="turns-ui-"))
    server = EmbeddedServer(data, port=free_port(), ui_port=free_port())
    await server.start()
    try:
        settings = Settings(
            temporal_address=server.address, data_dir=data, task_queue="ui-screenshot"
        )
        client = await runtime.connect(settings)
        async with runtime.running_worker(client, settings):
            turns = TurnsClient(client, settings.task_queue, settings.resolved_chunk_stream_url)
            result = await turns.send("conv-ui-demo", "What's the weather in Lisbon?")
            await turns.send("conv-ui-demo", "And in Madrid?")
            await turns.aclose()
        run_id = (await client.get_workflow_handle(result.workflow_id).describe()).run_id
        wf = urllib.parse.quote(result.workflow_id, safe="")
        url = f"{server.ui_url}/namespaces/default/workflows/{wf}/{run_id}/history"
        out.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(screenshot, url, out, str(data / "chromium"))
        print(f"saved {out} ({url})")
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "turn-history.png")
    asyncio.run(main(parser.parse_args().out))
