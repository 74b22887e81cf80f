"""The README's first command, `turns demo`, end to end: it runs and leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from durable_turns.devserver import port_open
from tests.support.probes import free_port

ROOT = Path(__file__).resolve().parents[1]


async def test_turns_demo_runs_offline_and_cleans_up(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))},
        "TURNS_DATA_DIR": str(tmp_path / "data"),
        "TURNS_EMBEDDED_PORT": str(port),
        "TURNS_UI_PORT": str(ui_port),
    }
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "durable_turns.cli", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "a scripted demo, not an LLM" in text
    assert "Here is the forecast for Paris" in text and "Here is the forecast for Tokyo" in text
    assert text.count("[completed · 2 steps") == 2
    assert "ConversationWorkflow  demo-" in text and "/turn-2" in text
    assert f"http://127.0.0.1:{ui_port}/namespaces/default/workflows" in text
    assert "stops its server as it ends" in text and "`turns demo --keep`" in text
    assert "nothing left running" in text
    assert not port_open("127.0.0.1", port) and not port_open("127.0.0.1", ui_port)
