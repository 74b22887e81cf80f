"""Prometheus metrics from the Temporal runtime, one env var away; secrets stay out of history."""

from __future__ import annotations

import asyncio
import urllib.request

from tests.support.harness import Harness
from tests.support.probes import free_port


async def test_prometheus_metrics_endpoint(harness: Harness) -> None:
    port = free_port()
    harness.start_worker(TURNS_PROMETHEUS_BIND=f"127.0.0.1:{port}")
    result = await harness.send(harness.conv("metrics"), "hi", model="demo:echo")
    assert result.status == "completed"
    url = f"http://127.0.0.1:{port}/metrics"
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    assert "temporal_activity_execution_latency" in body
    assert 'activity_type="model_step"' in body


async def test_secrets_never_reach_history(harness: Harness) -> None:
    secret = "sk-ant-api03-SECRET-do-not-leak-1234567890"
    harness.start_worker(ANTHROPIC_API_KEY=secret, OPENAI_API_KEY=secret)
    # a provider call that fails with the key configured: the error reaches history
    conversation = harness.conv("secret")
    result = await harness.send(conversation, "hi", model="anthropic:claude-x", body={"k": 1})
    assert result.status == "error"
    for workflow_id in (conversation, result.workflow_id):
        history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
        assert secret not in history.to_json()
    worker_log = harness.workers[0].log_tail(200_000)
    assert secret not in worker_log
