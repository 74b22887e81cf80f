"""A newcomer's first hour (issue 16): the `turns` command from anywhere, never hanging,
never silent, and a worker that says what it serves."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from temporalio.client import Client

from durable_turns.client import TurnsClient
from durable_turns.codec import data_converter_from_env
from durable_turns.config import Settings, default_data_dir, mask_url
from durable_turns.contract import TurnResult
from durable_turns.devserver import port_open, temporal_binary
from tests.support.harness import Harness
from tests.support.probes import free_port, wait_until


def turns(harness: Harness, cwd: Path, *args: str, timeout: float = 60, **env: str):
    """``turns ARGS`` run from ``cwd`` against the harness's server and task queue."""
    full = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))},
        "TEMPORAL_ADDRESS": harness.address,
        "TURNS_TASK_QUEUE": harness.task_queue,
        **env,
    }
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "durable_turns.cli", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_default_data_dir_is_per_user_not_per_directory(
    tmp_path: Path, monkeypatch: object
) -> None:
    mp = monkeypatch  # type: ignore[assignment]
    mp.delenv("TURNS_DATA_DIR", raising=False)  # type: ignore[attr-defined]
    mp.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # type: ignore[attr-defined]
    mp.chdir(tmp_path)  # type: ignore[attr-defined]
    assert default_data_dir() == tmp_path / "xdg" / "durable-turns"
    assert Settings.from_env().data_dir.is_absolute()
    mp.delenv("XDG_DATA_HOME")  # type: ignore[attr-defined]
    assert default_data_dir() == Path.home() / ".local" / "share" / "durable-turns"
    mp.setenv("TURNS_DATA_DIR", "rel/data")  # type: ignore[attr-defined]
    assert default_data_dir() == tmp_path / "rel" / "data"  # made absolute once, at start
    settings = Settings.from_env()
    assert settings.resolved_store_url == f"sqlite:///{tmp_path}/rel/data/transcripts.db"


def test_urls_are_masked() -> None:
    assert mask_url("postgresql://app:s3cret@db:5432/turns") == "postgresql://app:***@db:5432/turns"
    assert mask_url("redis://:pw@cache:6379/0") == "redis://:***@cache:6379/0"
    assert mask_url("redis://cache:6379/0?password=pw&ttl=60") == (
        "redis://cache:6379/0?password=***&ttl=60"
    )
    assert mask_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"


async def test_chat_from_another_directory_streams_with_the_default_data_dir(
    harness: Harness, tmp_path: Path
) -> None:
    xdg = str(tmp_path / "xdg")
    # the worker (started in the project folder) and the CLI (elsewhere) use the defaults
    harness.start_worker(TURNS_DATA_DIR="", TURNS_STORE_URL="", XDG_DATA_HOME=xdg)
    conversation = harness.conv("elsewhere")
    out = await asyncio.to_thread(
        turns, harness, tmp_path / "elsewhere", "chat", conversation, "Weather in Oslo?",
        XDG_DATA_HOME=xdg,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Here is the forecast for Oslo" in out.stdout
    assert "[turn 1 · completed" in out.stdout
    shown = await asyncio.to_thread(
        turns, harness, tmp_path / "yet-another", "transcript", conversation, XDG_DATA_HOME=xdg
    )
    assert shown.returncode == 0 and "forecast for Oslo" in shown.stdout


async def test_chat_never_hangs_on_a_stream_it_cannot_find(
    harness: Harness, tmp_path: Path
) -> None:
    harness.start_worker()  # keeps its data in <tmp>/data
    conversation = harness.conv("lost")
    elsewhere = tmp_path / "elsewhere"
    out = await asyncio.to_thread(
        turns, harness, elsewhere, "chat", conversation, "Weather in Rome?",
        TURNS_DATA_DIR=str(tmp_path / "other-data"),
    )  # fmt: skip
    assert out.returncode == 1
    assert "Here is the forecast for Rome" in out.stdout  # the reply, from the turn's result
    assert "live chunk stream was not found" in out.stderr
    assert str(tmp_path / "data" / "chunks.db") in out.stderr  # where the worker keeps it
    assert "Traceback" not in out.stderr

    state = await asyncio.to_thread(turns, harness, elsewhere, "state", conversation)
    assert state.returncode == 0, state.stderr
    assert '"conversation_id"' in state.stdout
    assert f"chunk stream sqlite:///{tmp_path / 'data' / 'chunks.db'}" in state.stderr
    assert f"transcripts sqlite:///{tmp_path / 'transcripts.db'}" in state.stderr

    shown = await asyncio.to_thread(
        turns, harness, elsewhere, "transcript", conversation,
        TURNS_DATA_DIR=str(tmp_path / "other-data"),
    )  # fmt: skip
    assert shown.returncode == 1
    assert f"no messages of conversation {conversation!r}" in shown.stderr
    assert str(tmp_path / "transcripts.db") in shown.stderr


async def test_chat_without_a_worker_says_so(harness: Harness, tmp_path: Path) -> None:
    out = await asyncio.to_thread(turns, harness, tmp_path, "chat", harness.conv("none"), "hi")
    assert out.returncode == 1
    assert f"no worker polls task queue {harness.task_queue!r}" in out.stderr
    missing = await asyncio.to_thread(turns, harness, tmp_path, "state", harness.conv("nope"))
    assert missing.returncode == 1 and "no conversation" in missing.stderr


# --- your own tools and hooks, from your own folder ----------------------------------------

MYTOOLS = '''
from pydantic import BaseModel

from durable_turns import ToolContext, tool


class OrderArgs(BaseModel):
    order_id: str


@tool
async def lookup_order(args: OrderArgs, ctx: ToolContext) -> dict:
    """Look up an order by id."""
    return {"order": args.order_id, "status": "shipped"}
'''

MYHOOKS = """
from durable_turns import TurnConfig, TurnContext, TurnHooks


class MyHooks(TurnHooks):
    async def before_turn(self, ctx: TurnContext) -> TurnConfig | None:
        return TurnConfig(temperature=0.25)
"""


class UserWorker:
    """``turns worker ARGS`` started from the user's own folder."""

    def __init__(self, harness: Harness, cwd: Path, *args: str, **env: str) -> None:
        self.log = cwd / f"worker-{len(args)}.log"
        full = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))},
            "TEMPORAL_ADDRESS": harness.address,
            "TURNS_TASK_QUEUE": harness.task_queue,
            "TURNS_DATA_DIR": str(cwd / "data"),
            "TURNS_DEMO_DIR": str(harness.tmp),  # where harness.script() writes
            "PYTHONPATH": "",
            **env,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "durable_turns.cli", "worker", *args],
            cwd=cwd,
            env=full,
            stdout=open(self.log, "wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_for(self, text: str, within: float = 60) -> str:
        for _ in range(int(within * 10)):
            out = self.output()
            if text in out:
                return out
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited ({self.proc.returncode}):\n{out}")
            await asyncio.sleep(0.1)
        raise AssertionError(f"{text!r} not seen:\n{self.output()}")

    def exit(self, within: float = 60) -> tuple[int, str]:
        code = self.proc.wait(within)
        return code, self.output()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def test_tools_and_hooks_from_the_current_directory(harness: Harness, tmp_path: Path) -> None:
    home = tmp_path / "myproject"
    home.mkdir()
    (home / "mytools.py").write_text(MYTOOLS)
    (home / "myhooks.py").write_text(MYHOOKS)
    worker = UserWorker(harness, home, "--tools", "mytools", "--hooks", "myhooks:MyHooks")
    try:
        out = await worker.wait_for("  chunks ")
        ready = out[out.index("worker ready") :]
        assert f"Temporal {harness.address} · namespace default" in ready
        assert f"task queue {harness.task_queue!r}" in ready
        assert "model       demo:weather (a scripted demo, not an LLM" in ready
        assert f"demo dir    {harness.tmp.resolve()} (TURNS_DEMO_DIR: demo:<name>" in ready
        assert "tools       get_weather, lookup_order" in ready
        assert "hooks       myhooks:MyHooks" in ready
        assert f"store       sqlite:///{home / 'data' / 'transcripts.db'}" in ready
        assert f"chunks      sqlite:///{home / 'data' / 'chunks.db'}" in ready
        script = harness.script(
            [
                {"tool_calls": [{"name": "lookup_order", "input": {"order_id": "A-1"}}]},
                {"text": "Order: {tool_result} at temperature {request.temperature}."},
            ]
        )
        result = await harness.send(harness.conv("mine"), "Where is A-1?", model=script)
        assert result.status == "completed", result.error
        assert "shipped" in result.text and "temperature 0.25" in result.text
    finally:
        worker.stop()


async def test_a_module_that_fails_to_import_is_one_clear_line(
    harness: Harness, tmp_path: Path
) -> None:
    home = tmp_path / "myproject"
    home.mkdir()
    (home / "broken.py").write_text("from durable_turns import tool\n\nx = (1,\n")
    (home / "raising.py").write_text("import json\n\n\nraise RuntimeError('no config file')\n")
    (home / "myhooks.py").write_text(MYHOOKS)
    cases = [
        (("--tools", "nosuch"), "--tools nosuch: no module named 'nosuch' in"),
        (("--tools", "broken"), "--tools broken: importing it raised SyntaxError"),
        (
            ("--tools", "raising"),
            "--tools raising: importing it raised RuntimeError: no config file",
        ),
        (("--hooks", "myhooks:Nope"), "--hooks myhooks:Nope: module 'myhooks' has no 'Nope'"),
        (("--hooks", "nosuch:MyHooks"), "--hooks nosuch: no module named 'nosuch'"),
    ]
    for args, expected in cases:
        worker = UserWorker(harness, home, *args)
        code, out = await asyncio.to_thread(worker.exit)
        assert code != 0, out
        assert expected in out, out
        assert "Traceback" not in out, out
        lines = [line for line in out.splitlines() if line.strip()]
        assert len(lines) == 1, out
    code, out = await asyncio.to_thread(UserWorker(harness, home, "--tools", "broken").exit)
    assert f"{home / 'broken.py'}:3" in out, out
    code, out = await asyncio.to_thread(UserWorker(harness, home, "--tools", "raising").exit)
    assert f"{home / 'raising.py'}:4" in out, out


def test_the_ready_lines_mask_passwords() -> None:
    from durable_turns.hooks import TurnHooks
    from durable_turns.runtime import ready_lines
    from durable_turns.user_code import load_tools

    settings = Settings(
        temporal_address="temporal.internal:7233",
        store_url="postgresql://app:s3cret@db:5432/turns",
        chunk_stream_url="redis://:hunter2@cache:6379/0",
        model="anthropic:claude-haiku-4-5",
    )
    text = "\n".join(ready_lines(settings, TurnHooks(), load_tools([]), None))
    assert "s3cret" not in text and "hunter2" not in text
    assert "store       postgresql://app:***@db:5432/turns" in text
    assert "chunks      redis://:***@cache:6379/0" in text
    assert "worker ready: Temporal temporal.internal:7233 · namespace default" in text
    assert "model       anthropic:claude-haiku-4-5; providers demo, anthropic" in text
    assert "hooks       default (TurnHooks)" in text
    assert "demo dir    (TURNS_DEMO_DIR unset: the built-in demo scripts only)" in text
    shown = ready_lines(
        settings.with_overrides(demo_dir=Path("rel")), TurnHooks(), load_tools([]), None
    )
    assert f"  demo dir    {Path('rel').resolve()} (TURNS_DEMO_DIR: " in "\n".join(shown)


# --- a fresh `temporal server start-dev`, and a server that is not up yet -------------------


class PlainDevServer:
    """``temporal server start-dev`` as a user types it: no search attributes, no flags."""

    def __init__(self, tmp: Path, port: int) -> None:
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [
                temporal_binary(),
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--db-filename",
                str(tmp / f"temporal-{port}.db"),
                "--log-level",
                "error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def _turn_on(address: str, task_queue: str, conversation: str) -> TurnResult:
    client = await Client.connect(address, data_converter=data_converter_from_env())
    return await TurnsClient(client, task_queue).send(conversation, "Weather in Lima?")


async def test_a_worker_registers_missing_search_attributes_itself(
    harness: Harness, tmp_path: Path
) -> None:
    server = PlainDevServer(tmp_path, free_port())
    worker = None
    try:
        await wait_until(lambda: port_open("127.0.0.1", server.port), within=30)
        worker = UserWorker(harness, tmp_path, TEMPORAL_ADDRESS=server.address)
        out = await worker.wait_for("worker ready", within=90)
        assert (
            "registered the search attributes ConversationId, TurnStatus, TurnModel"
            " in namespace 'default'"
        ) in out
        assert "temporal operator search-attribute create" not in out
        result = await _turn_on(server.address, harness.task_queue, "sa-conv")
        assert result.status == "completed" and "forecast for Lima" in result.text
    finally:
        if worker is not None:
            worker.stop()
        server.stop()


async def test_a_server_that_refuses_gets_the_commands_instead() -> None:
    import pytest
    from temporalio.service import RPCError, RPCStatusCode

    from durable_turns.runtime import check_search_attributes

    class Operator:
        async def list_search_attributes(self, request: object) -> object:
            return type("Response", (), {"custom_attributes": {"TurnStatus": 2}})()

        async def add_search_attributes(self, request: object) -> None:
            raise RPCError("permission denied", RPCStatusCode.PERMISSION_DENIED, b"")

    client = type("Client", (), {"operator_service": Operator()})()
    with pytest.raises(SystemExit) as exit_:
        await check_search_attributes(client, "prod")  # type: ignore[arg-type]
    message = str(exit_.value.code)
    assert "did not let this worker register them (permission denied)" in message
    assert (
        "temporal operator search-attribute create --namespace prod --name ConversationId"
        " --type Keyword"
    ) in message
    assert "--name TurnModel" in message and "--name TurnStatus" not in message


async def test_a_worker_waits_for_its_server_and_survives_its_restart(
    harness: Harness, tmp_path: Path
) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    worker = UserWorker(harness, tmp_path, TEMPORAL_ADDRESS=address)
    server = None
    try:
        out = await worker.wait_for("retrying in", within=30)
        assert f"Temporal server at {address} unreachable" in out
        await asyncio.sleep(1.5)  # a few retries, still alive
        assert worker.proc.poll() is None, worker.output()
        server = PlainDevServer(tmp_path, port)
        await worker.wait_for("worker ready", within=90)
        first = await _turn_on(address, harness.task_queue, "restart-conv")
        assert first.status == "completed"
        server.stop()  # the server restarts under the worker
        await asyncio.sleep(2)
        assert worker.proc.poll() is None, worker.output()
        server = PlainDevServer(tmp_path, port)
        await wait_until(lambda: port_open("127.0.0.1", port), within=30)
        second = await asyncio.wait_for(
            _turn_on(address, harness.task_queue, "restart-conv"), timeout=90
        )
        assert second.status == "completed" and second.turn_number == 2
    finally:
        worker.stop()
        if server is not None:
            server.stop()


# --- friendly errors -------------------------------------------------------------------------


async def test_invalid_input_is_one_line_and_never_sent(harness: Harness, tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text('[{"text": "hi"},\n {"text": }]')
    (tmp_path / "notsteps.json").write_text('{"steps": ["hi"]}')
    cases = [
        (("--body", "{mode: browse}"), "turns chat: --body is not valid JSON (Expecting"),
        (("--body", "[1, 2]"), "turns chat: --body must be a JSON object, got list"),
        (("--metadata", "{user: 1}"), "turns chat: --metadata is not valid JSON (Expecting"),
        (("--metadata", '"u-1"'), "turns chat: --metadata must be a JSON object, got str"),
        (
            ("--metadata", '{"x": "' + "y" * 16_400 + '"}'),
            "turns chat: --metadata: metadata is 16408 bytes as JSON; the limit is 16384 bytes",
        ),
        (("--model", "claude"), "turns chat: --model 'claude' is not a provider:model id"),
        (
            ("--model", "demo:broken.json"),
            f"demo script {tmp_path / 'broken.json'} is not valid JSON (Expecting value at line 2",
        ),
        (
            ("--model", "demo:notsteps.json"),
            f"demo script {tmp_path / 'notsteps.json'} has step 0 that is not a JSON object",
        ),
    ]
    conversation = harness.conv("bad-input")
    for args, expected in cases:
        out = await asyncio.to_thread(
            turns,
            harness,
            tmp_path,
            "chat",
            conversation,
            "hi",
            *args,
            TURNS_DEMO_DIR=str(tmp_path),
        )
        assert out.returncode == 2, out
        assert expected in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    # nothing was sent: the conversation was never started
    missing = await asyncio.to_thread(turns, harness, tmp_path, "state", conversation)
    assert missing.returncode == 1 and "no conversation" in missing.stderr


# --- issue 29: answers that look like success --------------------------------------------

SLOW = [{"text": "one two three four five six seven eight nine ten", "delay_ms": 2000}]


async def test_cancel_says_what_it_cancelled(harness: Harness, tmp_path: Path) -> None:
    """Old code: `turns cancel` printed "cancel requested" and exited 0 whatever there was."""
    harness.start_worker()
    conversation = harness.conv("cancel")
    run = lambda *args: asyncio.to_thread(turns, harness, tmp_path, "cancel", *args)  # noqa: E731

    missing = await run(harness.conv("never-started"))
    assert missing.returncode == 1 and "no conversation" in missing.stderr, missing.stderr

    started = await harness.turns.start(conversation, "hi", model=harness.script(SLOW))
    await harness.turns.submit(conversation, "later", request_id="q-1")
    queued = await run(conversation, "--request", "q-1")
    assert queued.returncode == 0, queued.stderr
    assert queued.stdout.strip() == "cancelled queued request q-1: it will not run"

    running = await run(conversation)
    assert running.returncode == 0, running.stderr
    assert running.stdout.strip() == (
        f"cancelled turn 1 (request {started.request_id}): it ended aborted"
    )
    assert (await harness.turns.state(conversation)).last_result.status == "aborted"  # type: ignore[union-attr]

    for args, expected in [
        ((), f"nothing to cancel: conversation {conversation!r} has no running turn"),
        (("--request", "q-1"), "nothing to cancel: request q-1 already ended (aborted)"),
        (
            ("--request", started.request_id),
            f"nothing to cancel: turn 1 (request {started.request_id}) already ended (aborted)",
        ),
        (("--request", "nope"), f"conversation {conversation!r} has no request 'nope'"),
    ]:
        out = await run(conversation, *args)
        assert out.returncode == 1 and out.stdout == "", (args, out.stdout, out.stderr)
        assert expected in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


async def test_cancel_without_a_worker_or_on_a_closed_conversation(
    harness: Harness, tmp_path: Path
) -> None:
    """No worker to answer `state`: the cancel is sent and said unconfirmed, at once (not a
    30 s wait for the query); a closed conversation has nothing to cancel."""
    conversation = harness.conv("no-worker")
    handle = await harness.client.start_workflow(
        "ConversationWorkflow", id=conversation, task_queue=harness.task_queue
    )
    out = await asyncio.to_thread(turns, harness, tmp_path, "cancel", conversation, timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        f"cancel sent, not yet seen: no worker polls task queue {harness.task_queue!r} right"
        " now; once one does, the conversation cancels its running turn, if there is one"
        f" (`turns state {conversation}` then says how it ended)"
    )
    await handle.terminate()
    out = await asyncio.to_thread(turns, harness, tmp_path, "cancel", conversation, timeout=20)
    assert out.returncode == 1, out.stdout
    assert out.stderr.strip() == (
        f"turns: nothing to cancel: conversation {conversation!r} is terminated"
    )


def _sized_request(size: int, request_id: str) -> dict[str, object]:
    """A submitMessages request that is exactly ``size`` bytes as the conversation keeps it
    (its messages parsed, each id scoped to the request: what the queue bound counts)."""
    from durable_turns.contract import PendingRequest, SubmitMessages
    from durable_turns.workflows.conversation_machine import sized as _sized

    def kept(n: int) -> tuple[dict[str, object], int]:
        request = TurnsClient.request("x" * n, request_id=request_id)
        parsed = SubmitMessages.model_validate(request)
        messages = [
            m.model_copy(update={"id": f"{request_id}/{m.id or i}"})
            for i, m in enumerate(parsed.messages)
        ]
        pending = PendingRequest(
            request_id=request_id, messages=messages, body=parsed.body, model=parsed.model
        )
        return request, _sized(pending).size

    request, size_1 = kept(1)
    request, got = kept(1 + size - size_1)
    assert got == size
    return request


async def test_rejections_are_said_at_the_cli_in_plain_words(
    harness: Harness, tmp_path: Path
) -> None:
    """Old code: a rejected signal-with-start looked accepted (`turns continue` printed a
    "[turn 0 · error …]" line), a rejected update was a traceback, and an undecodable payload's
    reason read "request is not valid JSON: 1 validation error for any"."""
    from temporalio.api.common.v1 import Payload
    from temporalio.common import RawValue

    from durable_turns.contract import MAX_QUEUED_BYTES

    harness.start_worker()
    conversation = harness.conv("rejected")
    # an update the conversation refuses (its model id is too long): one line, exit 1
    chat = await asyncio.to_thread(
        turns, harness, tmp_path, "chat", conversation, "hi", "--model", "anthropic:" + "x" * 300
    )
    assert chat.returncode == 1, chat.stderr
    assert chat.stderr.strip() == (
        "turns: the conversation rejected the request (InvalidRequest): malformed request:"
        " model: model id is 310 bytes; the limit is 256 bytes"
    )
    # a signal-with-start the conversation rejects (its queue is full): said, exit 1
    await harness.turns.start(conversation, "hi", model=harness.script(SLOW))
    half = (MAX_QUEUED_BYTES - 20) // 2  # leaves 20 bytes: no room for a continue request
    for i in range(2):
        await harness.turns.conversation(conversation).signal(
            "submitMessages", _sized_request(half, f"big-{i}")
        )
    cont = await asyncio.to_thread(turns, harness, tmp_path, "continue", conversation)
    assert cont.returncode == 1, (cont.stdout, cont.stderr)
    assert "turns: the conversation rejected the request " in cont.stderr
    assert "(QueueFull): the conversation's queue is full (2 requests," in cont.stderr
    assert len(cont.stderr.strip().splitlines()) == 1 and "[turn" not in cont.stdout
    # an undecodable payload: the parser's words, not pydantic's
    await harness.client.get_workflow_handle(conversation).signal(
        "submitMessages", RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"not json"))
    )
    for _ in range(100):
        state = await harness.turns.state(conversation)
        if state.rejected_count == 2:  # the refused update was never recorded
            break
        await asyncio.sleep(0.1)
    reasons = [r.error.message for r in state.recent if r.status == "rejected" and r.error]
    assert reasons[-1] == "request is not valid JSON: expected ident at line 1 column 2", reasons
    shown = await asyncio.to_thread(turns, harness, tmp_path, "state", conversation)
    assert shown.returncode == 0, shown.stderr
    assert (
        "# 2 request(s) rejected; the latest, rejected-2 (InvalidPayload): request is not"
        " valid JSON: expected ident at line 1 column 2"
    ) in shown.stderr
    assert "validation error for" not in shown.stdout + shown.stderr
    assert shown.stdout.startswith("{\n  ") and '\n  "rejected_count": 2,' in shown.stdout
    await harness.client.get_workflow_handle(conversation).terminate()


async def test_the_conversation_id_filter_lists_the_conversation_too(harness: Harness) -> None:
    """Old code: the UI link's ``ConversationId="…"`` filter listed the turns only."""
    harness.start_worker()
    conversation = harness.conv("listed")
    assert (await harness.send(conversation, "Weather in Bern?")).status == "completed"
    found: dict[str, str] = {}
    for _ in range(100):  # visibility is eventually consistent
        found = {
            w.id: w.workflow_type
            async for w in harness.client.list_workflows(f'ConversationId="{conversation}"')
        }
        if len(found) == 2:
            break
        await asyncio.sleep(0.1)
    assert found == {
        conversation: "ConversationWorkflow",
        f"{conversation}/turn-1": "TurnWorkflow",
    }
