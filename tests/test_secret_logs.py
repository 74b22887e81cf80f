"""Every configured secret stays out of every log line, the state query, the transcript and
the workflow histories (issue 34, item 2).

A real worker process, configured with a secret in each place one can be set: a ``${VAR}`` in
an MCP streamable-HTTP server's URL and in a header, a literal header, a ``${VAR}`` and a
literal value in a stdio server's env, a provider key, the front door's token and the payload
encryption key. A turn calls both MCP servers (the HTTP client logs each request's URL at
INFO) and a tool that logs every value through the message, its arguments, a traceback and a
logger with a handler of its own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
from temporalio.client import Client

from durable_turns.client import TurnsClient
from durable_turns.codec import ENV_KEYS, EncryptionCodec, data_converter_from_env, generate_key
from tests.support.harness import Harness, WorkerProcess
from tests.support.probes import free_port
from tests.test_codec import all_payloads
from tests.test_mcp import SERVER, HttpServer

FRONT_TOKEN = "fdtok-0f1e2d3c4b5a69788796"
SECRETS = {
    "SECLOG_URL_KEY": "urlkey0a1b2c3d4e5f6a7b8c9d",
    "SECLOG_HEADER_TOKEN": "hdrtok9f8e7d6c5b4a3928170",
    "SECLOG_ENV_SECRET": "envsec1122334455667788aabb",
    "ANTHROPIC_API_KEY": "antkey-live-4455aa66bb77cc88dd99",
    "TURNS_HTTP_TOKEN": f"alice={FRONT_TOKEN}",
}
LITERAL_HEADER = "lithdr-5a5b5c5d5e5f50515253"
LITERAL_ENV = "litenv-7a7b7c7d7e7f70717273"
ENCRYPTION_KEY = generate_key()


def leaked(text: str) -> list[str]:
    """The secrets of which ``text`` holds any 12 characters (in any case)."""
    lowered = text.lower()
    values = {**SECRETS, "literal header": LITERAL_HEADER, "literal env": LITERAL_ENV}
    values["encryption key"] = ENCRYPTION_KEY
    values["front door token"] = FRONT_TOKEN
    return [
        name
        for name, value in values.items()
        if any(value[i : i + 12].lower() in lowered for i in range(len(value) - 11))
    ]


async def history_text(client: Client, codec: EncryptionCodec, workflow_id: str) -> str:
    """A workflow's history as JSON, and each of its payloads decrypted."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    decoded = []
    for event in history.events:
        for payload in await codec.decode(list(all_payloads(event))):
            decoded.append(payload.data.decode(errors="replace"))
    return history.to_json() + "\n".join(decoded)


async def test_no_configured_secret_reaches_a_log_state_transcript_or_history(
    harness: Harness,
) -> None:
    port = free_port()
    server = HttpServer(harness.tmp, port)
    config = harness.tmp / "mcp.json"
    servers = {
        "h": {
            "url": f"http://127.0.0.1:{port}/mcp?key=${{SECLOG_URL_KEY}}",
            "headers": {
                "Authorization": "Bearer ${SECLOG_HEADER_TOKEN}",
                "X-Api-Key": LITERAL_HEADER,
            },
        },
        "s": {
            "command": sys.executable,
            "args": [str(SERVER)],
            "env": {
                "MCP_TEST_LOG": "${MCP_TEST_LOG}",
                "SECLOG_ENV": "${SECLOG_ENV_SECRET}",
                "LITERAL": LITERAL_ENV,
            },
        },
    }
    config.write_text(json.dumps({"mcpServers": servers}))
    keys = f"k1:{ENCRYPTION_KEY}"
    converter = data_converter_from_env({ENV_KEYS: keys})
    assert isinstance(converter.payload_codec, EncryptionCodec)
    try:
        worker = harness.start_worker(
            TURNS_MCP_CONFIG=str(config),
            TURNS_TOOLS="tests.support.secret_tools",
            MCP_TEST_LOG=str(harness.tmp / "mcp.jsonl"),
            TURNS_ENCRYPTION_KEYS=keys,
            SECLOG_PLAIN="a plain value",
            **SECRETS,
        )
        client = await Client.connect(harness.address, data_converter=converter)
        turns = TurnsClient(client, harness.task_queue)
        conversation = harness.conv("secrets")
        logged = [*SECRETS, "TURNS_ENCRYPTION_KEYS", "SECLOG_PLAIN"]
        model = harness.script(
            [
                {"tool_calls": [{"name": "mcp__h__echo", "input": {"text": "one"}}]},
                {"tool_calls": [{"name": "mcp__s__echo", "input": {"text": "two"}}]},
                {"tool_calls": [{"name": "log_secrets", "input": {"names": logged}}]},
                {"text": "done"},
            ]
        )
        result = await turns.send(conversation, "go", model=model)
        assert result.status == "completed", result.error
        log = worker.log_tail(2_000_000)
        # the lines are there, each secret masked
        assert f"HTTP Request: POST http://127.0.0.1:{port}/mcp?key=*** " in log
        assert "through its own handler: '***'" in log
        assert "RuntimeError: an error about ***" in log
        assert "as an argument: a plain value" in log  # what is not secret stays
        assert leaked(log) == []

        state = await turns.state(conversation)
        assert leaked(state.model_dump_json()) == []
        turn_state = await client.get_workflow_handle(result.workflow_id).query("state")
        assert leaked(json.dumps(turn_state)) == []
        stored = await (await harness.store()).messages(conversation)
        transcript = json.dumps([m.model_dump(mode="json") for m in stored])
        assert "echo: one" in transcript and "echo: two" in transcript
        assert leaked(transcript) == []
        codec = converter.payload_codec
        for workflow_id in (conversation, result.workflow_id):
            text = await history_text(client, codec, workflow_id)
            assert leaked(text) == []
        assert "mcp__h__echo" in await history_text(client, codec, result.workflow_id)
    finally:
        server.kill()


async def test_no_configured_secret_reaches_the_front_doors_log(harness: Harness) -> None:
    """``turns serve``: a record logged to uvicorn's own logger (its handler added by
    uvicorn's logging config as it starts, after the redaction was installed) is masked."""
    port = free_port()
    env = harness.env(TURNS_ENCRYPTION_KEYS=f"k1:{ENCRYPTION_KEY}", **SECRETS)
    args = ["-c", "from durable_turns.cli import main; main()", "serve", "--port", str(port)]
    auth = ["--auth", "tests.support.secret_tools:authenticate"]
    door = WorkerProcess(env, harness.tmp / "serve.log", [*args, *auth], marker=b"front door on")
    try:
        door.wait_ready(30)
        async with httpx.AsyncClient() as http:
            url = f"http://127.0.0.1:{port}/api/chat/c1/messages"
            allowed = await http.get(url, headers={"authorization": f"Bearer {FRONT_TOKEN}"})
            refused = await http.get(url, headers={"authorization": "Bearer wrong"})
        assert (allowed.status_code, refused.status_code) == (200, 401)
        log = door.log_tail(200_000)
        assert "auth: Bearer *** (keys k1:***, provider ***)" in log
        assert "auth: Bearer wrong" in log
        assert leaked(log) == []
    finally:
        door.stop()


def test_every_place_a_secret_is_configured_is_registered(tmp_path: Path) -> None:
    """The environment's secrets (those the worker test does not configure among them), a
    literal MCP URL's password and key, and a file of encryption keys: each is masked."""
    from durable_turns.environment_secrets import register_environment
    from durable_turns.mcp import McpServerConfig
    from durable_turns.redaction import redact

    keys_file = tmp_path / "keys"
    file_key = generate_key()
    keys_file.write_text(f"k9:{file_key}\n")
    values = {
        "store password": "storepw-11aa22bb33cc44dd",
        "stream token": "streamtok-55ee66ff77aa88",
        "gateway password": "gatewaypw-99bb00cc11dd22",
        "codec server token": "codectok-33ee44ff55aa66bb",
        "MCP URL password": "mcpurlpw-77cc88dd99ee00",
        "MCP URL key": "mcpurlkey-11ff22aa33bb44",
        "encryption key file": file_key,
    }
    register_environment(
        {
            "TURNS_STORE_URL": f"postgresql://app:{values['store password']}@db/turns",
            "TURNS_CHUNK_STREAM_URL": f"redis://cache:6379/0?token={values['stream token']}",
            "OPENAI_BASE_URL": f"https://user:{values['gateway password']}@gw.example/v1",
            "TURNS_CODEC_SERVER_TOKEN": values["codec server token"],
            "TURNS_ENCRYPTION_KEYS_FILE": str(keys_file),
        }
    )
    url = f"https://u:{values['MCP URL password']}@mcp.example/mcp?key={values['MCP URL key']}"
    server = McpServerConfig(name="x", url=url, headers={"Accept": "application/json"})
    server.resolved()
    assert server.describe() == "http: https://u:***@mcp.example/mcp?key=***"
    for name, value in values.items():
        assert redact(f"said {value} twice: {value.lower()}") == "said *** twice: ***", name
    assert redact("application/json") == "application/json"
