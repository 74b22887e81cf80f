"""Keys never appear in errors, logs or history; passwords in store and stream URLs never in
errors. A real worker process, the Anthropic SDK against the replay server (a gateway that
echoes the key back in its ``request-id`` header)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import pytest

from testkit.llm_server import LLMServer, Reply
from tests.support.harness import Harness
from tests.support.probes import recorded_result

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


# --- issue 25, item 3: any run of 12 characters of a key -------------------------------------

GATEWAY_KEY = "gwk_live_GATEWAYSECRET0123456789abcdefXYZ98765"
"""Not shaped like ``sk-…``: only the key's own characters can give it away."""


def _fragments(key: str) -> dict[str, str]:
    return {
        "a 40-character prefix": key[:40],
        "a lower-cased fragment": key[9:31].lower(),
        "a base64 fragment": _b64("user:" + key)[12:40],
    }


def _leaked(text: str, key: str) -> list[str]:
    """Which of the fragments ``text`` holds, or any 12 characters of the key in any case."""
    lowered = text.lower()
    found = [name for name, frag in _fragments(key).items() if frag.lower() in lowered]
    found += [
        f"key[{i}:{i + 12}]" for i in range(len(key) - 11) if key[i : i + 12].lower() in lowered
    ]
    return found


async def test_a_partial_key_echoed_by_a_gateway_reaches_no_error_state_history_or_log(
    harness: Harness, server: LLMServer
) -> None:
    """Old code: only the whole key (and its whole base64 forms) was masked; a gateway that
    echoed the key's first 40 characters in its request-id, a lower-cased piece of it or a
    piece of its base64 got them into TurnResult.error, state, the history and the log."""
    frags = _fragments(GATEWAY_KEY)
    worker = harness.start_worker(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY=GATEWAY_KEY)
    body = json.dumps(
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": f"model not found for key {frags['a lower-cased fragment']}"
                f" (auth {frags['a base64 fragment']})",
            },
        }
    )
    server.default = Reply(
        body=body, status=400, headers={"request-id": f"req_{frags['a 40-character prefix']}"}
    )
    conversation = harness.conv("partial")
    result = await harness.send(conversation, "hi", model="anthropic:claude-test-model")
    assert result.status == "error" and result.error is not None
    assert "model not found for key ***" in result.error.message  # the error itself is kept
    assert "[request req_***]" in result.error.message
    assert _leaked(result.error.message, GATEWAY_KEY) == []
    assert (await recorded_result(harness, conversation, turn=1)).error is not None
    state = await harness.turns.state(conversation)
    assert _leaked(state.model_dump_json(), GATEWAY_KEY) == []
    turn_state = await harness.client.get_workflow_handle(result.workflow_id).query("state")
    assert _leaked(json.dumps(turn_state), GATEWAY_KEY) == []
    assert _leaked(await history_text(harness, result.workflow_id), GATEWAY_KEY) == []
    assert _leaked(await history_text(harness, conversation), GATEWAY_KEY) == []
    stored = await (await harness.store()).messages(conversation)
    assert _leaked(json.dumps([m.model_dump(mode="json") for m in stored]), GATEWAY_KEY) == []
    log = worker.log_tail(200_000)
    assert "req_***" in log or "model not found" in log
    assert _leaked(log, GATEWAY_KEY) == []


def test_every_run_of_twelve_characters_is_masked_whole() -> None:
    """Any run of 12 or more characters of the key or of its base64 forms, at any alignment
    and in any case, becomes one ``***``; 11 characters, or other text, stay."""
    import random

    from durable_turns.redaction import redact, secret_forms

    rng = random.Random(25)
    key = GATEWAY_KEY
    redact("", key)  # a provider's key, known from now on
    for form in secret_forms(key):
        for start in range(0, len(form) - 11):
            for end in range(start + 12, len(form) + 1, 5):
                piece = "".join(c.upper() if rng.random() < 0.5 else c for c in form[start:end])
                masked = redact(f"id=({piece}) done")
                assert masked == "id=(***) done", (form, start, end, masked)
    assert redact(f"x {key[5:16]} y") == f"x {key[5:16]} y"  # 11 characters
    assert redact("ordinary text, 0123456789 and ids like 5d104027-9b21") == (
        "ordinary text, 0123456789 and ids like 5d104027-9b21"
    )
    assert redact(f"{key[:14]} and {key[20:40].lower()}") == "*** and ***"
    assert redact(f"Basic {_b64('user:' + key)}").startswith("Basic dXNlcjp")
    assert GATEWAY_KEY[12:24].lower() not in redact(f"Basic {_b64('user:' + key)}").lower()


def test_every_log_record_is_redacted_as_it_is_made() -> None:
    """Its message, arguments (kept where they hold no secret) and traceback; records that
    hold no secret are left as they are."""
    import logging

    from durable_turns.redaction import redact, redact_record

    redact("", GATEWAY_KEY)
    record = logging.LogRecord(
        "x", logging.WARNING, __file__, 1, "gateway said %s (%d)", (GATEWAY_KEY[3:30], 7), None
    )
    redact_record(record)
    assert record.args == ("***", 7)
    line = logging.Formatter("%(levelname)s %(message)s").format(record)
    assert line == "WARNING gateway said *** (7)"
    try:
        raise RuntimeError(f"bad key {GATEWAY_KEY}")
    except RuntimeError as e:
        failed = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "failed", (), (type(e), e, None)
        )
    redact_record(failed)
    text = logging.Formatter().format(failed)
    assert "RuntimeError: bad key ***" in text and _leaked(text, GATEWAY_KEY) == []
    plain = logging.LogRecord("x", logging.INFO, __file__, 1, "%s and %r", ("a", {"b": 1}), None)
    redact_record(plain)
    assert plain.args == ("a", {"b": 1}) and plain.getMessage() == "a and {'b': 1}"
