"""Keys never appear in errors, logs or history; passwords in store and stream URLs never in
errors. A real worker process, the Anthropic SDK against the replay server (a gateway that
echoes the key back in its ``request-id`` header)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import pytest

from tests.llm_server import LLMServer, Reply
from tests.support.harness import Harness

KEY = "sk-ant-api03-GATEWAYSECRET0123456789abcdefXYZ"
ERROR_BODY = json.dumps(
    {"type": "error", "error": {"type": "invalid_request_error", "message": "model not found"}}
)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


ECHOES = {
    "verbatim": f"req_{KEY}",
    "upper case": f"req_{KEY.upper()}",
    "base64": f"req_{_b64(KEY)}",
    "url-safe base64": base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("="),
    "basic auth": f"Basic {_b64('user:' + KEY)}",
}


def leaks(text: str) -> list[str]:
    """The forms of the key found in ``text`` (case-insensitively; base64 decoded too)."""
    found = [form for form, echo in ECHOES.items() if echo.lower() in text.lower()]
    if "gatewaysecret" in text.lower():
        found.append("a part of it")
    return found


def payload_texts(value: Any) -> list[str]:
    """Every string of a history's JSON, and each base64 ``data`` payload decoded."""
    out: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "data" and isinstance(v, str):
                try:
                    out.append(base64.b64decode(v).decode(errors="replace"))
                except (binascii.Error, ValueError):
                    out.append(v)
            out += payload_texts(v)
    elif isinstance(value, list):
        for v in value:
            out += payload_texts(v)
    elif isinstance(value, str):
        out.append(value)
    return out


async def history_text(harness: Harness, workflow_id: str) -> str:
    history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
    return "\n".join(payload_texts(json.loads(history.to_json())))


@pytest.mark.parametrize("form", list(ECHOES))
async def test_a_key_echoed_by_a_gateway_reaches_no_error_log_or_history(
    harness: Harness, server: LLMServer, form: str
) -> None:
    worker = harness.start_worker(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY=KEY)
    server.default = Reply(body=ERROR_BODY, status=400, headers={"request-id": ECHOES[form]})
    conversation = harness.conv("echo")
    result = await harness.send(conversation, "hi", model="anthropic:claude-test-model")
    assert result.status == "error" and result.error is not None
    assert "model not found" in result.error.message  # the error itself is kept
    assert leaks(result.error.message) == []
    assert leaks(await history_text(harness, result.workflow_id)) == []
    assert leaks(await history_text(harness, conversation)) == []
    assert leaks(worker.log_tail(200_000)) == []


@pytest.mark.parametrize(
    "variable, url",
    [
        ("TURNS_STORE_URL", "postgresq://turns:hunter2pw@127.0.0.1:5432/turns"),
        ("TURNS_STORE_URL", "postgresql://turns:hunter2pw@127.0.0.1:1/turns"),  # unreachable
        ("TURNS_CHUNK_STREAM_URL", "redis2://:hunter2pw@127.0.0.1:6379/0"),
        ("TURNS_CHUNK_STREAM_URL", "rediss2://127.0.0.1:6379/0?password=hunter2pw"),
    ],
)
async def test_a_mistyped_url_never_prints_its_password(
    harness: Harness, variable: str, url: str
) -> None:
    with pytest.raises(RuntimeError, match="worker exited") as failed:
        harness.start_worker(**{variable: url})
    message = str(failed.value)
    assert "hunter2pw" not in message
    if "://" in message:  # the URL is named, with its password masked
        assert "***" in message
    assert "hunter2pw" not in harness.workers[-1].log_tail(200_000)
