"""The README's first command, `turns demo`, end to end: it runs and leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


# --- issue 29: the demo always ends, prints only real addresses, and a port in use is a line --


def demo_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))},
        "TURNS_DATA_DIR": str(tmp_path / "data"),
        "TURNS_EMBEDDED_PORT": str(free_port()),
        "TURNS_UI_PORT": str(free_port()),
        **extra,
    }


def turns_cmd(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_turns.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,  # a demo that hangs fails here
    )


def spawn(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "durable_turns.cli", *args],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip


class FakeUI:
    """Something that answers HTTP, as the Temporal UI does, on a free port."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.port = free_port()
        self.server = http.server.HTTPServer(
            ("127.0.0.1", self.port), http.server.SimpleHTTPRequestHandler
        )
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_the_demo_on_a_server_it_did_not_start_ends_and_links_only_a_real_ui(
    temporal_address: str, tmp_path: Path
) -> None:
    """Old code: with TEMPORAL_ADDRESS the demo printed "Temporal UI: your Temporal UI/…"
    and then waited forever, silently."""
    env = demo_env(tmp_path, TEMPORAL_ADDRESS=temporal_address)
    out = await asyncio.to_thread(turns_cmd, env, "demo")
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert f"using the Temporal server at {temporal_address} (TEMPORAL_ADDRESS)" in text
    assert text.count("[completed · 2 steps") == 2
    assert "your Temporal UI" not in text and "/namespaces/" not in text
    assert f"Temporal UI: none found for the server at {temporal_address}" in text
    assert "set TURNS_UI_URL" in text and 'filter the workflows by ConversationId="demo-' in text
    assert "demo finished; its worker stopped" in text and "keeps running" in text

    ui = FakeUI()  # a UI that answers on TURNS_UI_PORT of the server's host: linked
    try:
        env["TURNS_UI_PORT"] = str(ui.port)
        host = temporal_address.rpartition(":")[0]
        out = await asyncio.to_thread(turns_cmd, env, "demo")
        assert out.returncode == 0, out.stderr[-3000:]
        assert (
            f"Temporal UI: http://{host}:{ui.port}/namespaces/default/workflows?query="
            in out.stdout
        )
    finally:
        ui.close()
    env["TURNS_UI_URL"] = "https://temporal.example.com/"  # said, not probed
    out = await asyncio.to_thread(turns_cmd, env, "demo")
    assert out.returncode == 0, out.stderr[-3000:]
    assert (
        "Temporal UI: https://temporal.example.com/namespaces/default/workflows?query="
        in out.stdout
    )


async def test_the_demo_uses_a_temporal_server_already_on_its_port(
    temporal_address: str, tmp_path: Path
) -> None:
    """Old code: a worker's embedded server on 7233 made the demo end in a 29-line traceback."""
    port = int(temporal_address.rpartition(":")[2])
    env = demo_env(tmp_path, TURNS_EMBEDDED_PORT=str(port))
    out = await asyncio.to_thread(turns_cmd, env, "demo")
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"using the Temporal server already running on 127.0.0.1:{port}" in out.stdout
    assert out.stdout.count("[completed · 2 steps") == 2
    assert "Traceback" not in out.stderr
    assert port_open("127.0.0.1", port)  # left running


def test_a_port_in_use_or_no_server_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        cases = [
            (
                ("demo",),
                {"TURNS_EMBEDDED_PORT": busy},
                f"127.0.0.1:{busy} is in use, and not by a Temporal server",
            ),
            (
                ("server",),
                {"TURNS_EMBEDDED_PORT": busy},
                f"something already listens on 127.0.0.1:{busy}",
            ),
            (
                ("worker",),
                {"TURNS_EMBEDDED_PORT": busy},
                f"something already listens on 127.0.0.1:{busy}",
            ),
            (("demo",), {"TURNS_UI_PORT": busy}, f"its UI port {busy} is already in use"),
            (
                ("demo",),
                {"TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"},
                "cannot connect to the Temporal server at 127.0.0.1:",
            ),
        ]
        for args, extra, expected in cases:
            out = turns_cmd(demo_env(tmp_path, **extra), *args, timeout=60)
            assert out.returncode == 1, (args, out.stdout, out.stderr)
            assert expected in out.stderr, (args, out.stderr)
            lines = [line for line in out.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and "Traceback" not in out.stderr, (args, out.stderr)


def http_json(url: str) -> Any:
    import json
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


async def test_demo_keep_keeps_the_server_and_ui_until_ctrl_c(tmp_path: Path) -> None:
    """Old code: --keep printed "server and worker keep running" and stopped them at once."""
    import signal

    from durable_turns.devserver import http_answers

    env = demo_env(tmp_path)
    port, ui_port = int(env["TURNS_EMBEDDED_PORT"]), int(env["TURNS_UI_PORT"])
    log = tmp_path / "demo.log"
    proc = spawn(env, log, "demo", "--keep")
    try:
        for _ in range(1200):
            if "Ctrl-C stops them" in log.read_text() or proc.poll() is not None:
                break
            await asyncio.sleep(0.1)
        text = log.read_text()
        assert (
            "server, UI, chat page and the demo's worker keep running; Ctrl-C stops them." in text
        ), text
        await asyncio.sleep(1)
        assert proc.poll() is None, text  # still up
        assert port_open("127.0.0.1", port)
        link = next(w for w in text.split() if w.startswith(f"http://127.0.0.1:{ui_port}/"))
        assert await asyncio.to_thread(http_answers, link, 10)
        # the chat page beside it, with the demo's conversation open
        page = next(w for w in text.split() if "/?chat=demo-" in w)
        assert await asyncio.to_thread(http_answers, page, 10)
        base, chat = page.split("/?chat=")
        messages = await asyncio.to_thread(http_json, f"{base}/api/chat/{chat}/messages")
        assert [m["role"] for m in messages] == ["user", "assistant"] * 2
        proc.send_signal(signal.SIGINT)
        # the chat page's demo streams at reading pace (issue 34 item 5)
        assert "(model demo:weather-paced: a scripted demo, not an LLM at reading pace" in text
        assert await asyncio.to_thread(proc.wait, 60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert log.read_text().rstrip().endswith("stopped.")
    assert not port_open("127.0.0.1", port) and not port_open("127.0.0.1", ui_port)


async def test_the_demo_says_what_it_waits_for_and_gives_up(
    temporal_address: str, tmp_path: Path, capsys: object, monkeypatch: object
) -> None:
    """A turn that does not finish is named while the demo waits, then given up: one line,
    exit status 1, never a silent wait."""
    import json

    from durable_turns import demo
    from durable_turns.config import Settings

    mp = monkeypatch  # type: ignore[assignment]
    mp.setattr(demo, "TURN_NOTICE_S", 0.5)  # type: ignore[attr-defined]
    mp.setattr(demo, "TURN_TIMEOUT_S", 1.5)  # type: ignore[attr-defined]
    (tmp_path / "slow.json").write_text(json.dumps([{"text": "a b c d e f", "delay_ms": 1000}]))
    settings = Settings(
        temporal_address=temporal_address,
        data_dir=tmp_path / "data",
        model="demo:slow.json",
        demo_dir=tmp_path,
        shutdown_grace_s=0,
    )
    assert await demo.run_demo(settings) == 1
    err = capsys.readouterr()  # type: ignore[attr-defined]
    waiting = "waiting for turn 1's result (workflow demo-"
    assert err.out.count(waiting) == 2 and "giving up at 1.5s" in err.out
    assert "on task queue 'durable-turns-demo'" in err.out
    assert "turns demo: gave up waiting for turn 1's result" in err.err
    assert "after 1.5s" in err.err and len(err.err.strip().splitlines()) == 1


def test_the_first_command_says_where_turns_and_temporal_are(
    capsys: object, monkeypatch: object
) -> None:
    """The README's `turns` and `temporal` lines need .venv/bin on PATH: `scripts/dev.py
    demo` ends by saying so, unless it is already there."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dev_script", ROOT / "scripts" / "dev.py")
    assert spec is not None and spec.loader is not None
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    mp = monkeypatch  # type: ignore[assignment]
    mp.chdir(ROOT)  # type: ignore[attr-defined]
    mp.setenv("PATH", "/usr/bin:/bin")  # type: ignore[attr-defined]
    dev.say_where_the_commands_are()
    said = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "`turns` and `temporal` are in .venv/bin: `source .venv/bin/activate`" in said
    mp.setenv("PATH", f"{dev.BIN}:/usr/bin:/bin")  # type: ignore[attr-defined]
    dev.say_where_the_commands_are()
    assert capsys.readouterr().out == ""  # type: ignore[attr-defined]
