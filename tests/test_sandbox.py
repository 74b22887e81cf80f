"""The lean sandbox runner answers every payload's serialization context as the stock one does,
and runs the sandbox's own snippets compiled once (the plain runner: ``test_workflow_runner.py``).

``durable_turns.sandbox.LeanSandboxedWorkflowRunner`` asks the sandboxed workflow for each
payload's context directly instead of through an ``exec`` in the sandbox. A codec that is
given a context (encryption keyed per workflow, say) must see the very same contexts either
way: here a recording codec runs one workflow (an activity, a child workflow, a signal to
it, an update) under each runner against the real dev server, and the two records must match.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import timedelta
from types import CodeType
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)
from temporalio.worker import Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from durable_turns import sandbox
from durable_turns.sandbox import LeanSandboxedWorkflowRunner, sandbox_runner


class RecordingCodec(PayloadCodec, WithSerializationContext):
    """Passes payloads through; records (direction, context) for each one."""

    def __init__(self, record: list[str], context: SerializationContext | None = None) -> None:
        self.record, self.context = record, context

    def with_context(self, context: SerializationContext) -> RecordingCodec:
        return RecordingCodec(self.record, context)

    def _note(self, direction: str, n: int) -> None:
        c = self.context
        if isinstance(c, ActivitySerializationContext):
            what = f"activity {c.activity_type} of {c.workflow_id}"
        elif isinstance(c, WorkflowSerializationContext):
            what = f"workflow {c.workflow_id}"
        else:
            what = repr(c)
        self.record.extend([f"{direction} {what}"] * n)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self._note("encode", len(payloads))
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self._note("decode", len(payloads))
        return list(payloads)


@activity.defn(name="sandbox_echo")
async def echo(text: str) -> str:
    return text.upper()


@workflow.defn(name="SandboxChild", sandboxed=True)
class Child:
    def __init__(self) -> None:
        self.poked = ""

    @workflow.run
    async def run(self, text: str) -> str:
        await workflow.wait_condition(lambda: bool(self.poked))
        return f"{text}/{self.poked}"

    @workflow.signal
    def poke(self, value: str) -> None:
        self.poked = value


@workflow.defn(name="SandboxParent", sandboxed=True)
class Parent:
    def __init__(self) -> None:
        self.child_result = ""
        self.seen = ""

    @workflow.run
    async def run(self, text: str) -> str:
        shouted = await workflow.execute_activity(
            echo, text, start_to_close_timeout=timedelta(seconds=30), summary="echo it"
        )
        child = await workflow.start_child_workflow(
            Child.run, shouted, id=f"{workflow.info().workflow_id}-child", static_summary="kid"
        )
        await child.signal(Child.poke, "poked")
        self.child_result = await child
        await workflow.wait_condition(lambda: bool(self.seen))
        return f"{shouted} {self.seen}"

    @workflow.update
    async def see(self, value: str) -> str:
        await workflow.wait_condition(lambda: bool(self.child_result))
        self.seen = value
        return self.child_result


async def run_once(
    client: Client, runner: WorkflowRunner, tag: str, codec: bool = True
) -> list[str]:
    record: list[str] = []
    converter = dataclasses.replace(
        client.data_converter, payload_codec=RecordingCodec(record) if codec else None
    )
    config = client.config()
    config["data_converter"] = converter
    own = Client(**config)
    queue = f"sandbox-{tag}-{uuid.uuid4().hex[:6]}"
    async with Worker(
        own, task_queue=queue, workflows=[Parent, Child], activities=[echo], workflow_runner=runner
    ):
        workflow_id = f"sandbox-{tag}-{uuid.uuid4().hex[:8]}"
        handle = await own.start_workflow(Parent.run, "hi", id=workflow_id, task_queue=queue)
        assert await handle.execute_update(Parent.see, "seen") == "HI/poked"
        assert await handle.result() == "HI seen"
    # the workflow ids differ from run to run; compare the shapes
    return [line.replace(workflow_id, "sandbox-X") for line in record]


async def test_lean_runner_gives_codecs_the_stock_contexts(client: Client) -> None:
    stock = await run_once(client, SandboxedWorkflowRunner(), "stock")
    lean = await run_once(client, LeanSandboxedWorkflowRunner(), "lean")
    assert any(line.startswith("encode activity sandbox_echo") for line in stock), stock
    assert any("workflow sandbox-X-child" in line for line in stock), stock
    assert sorted(lean) == sorted(stock)


def test_the_worker_uses_the_lean_runner() -> None:
    runner: Any = sandbox_runner()
    assert isinstance(runner, LeanSandboxedWorkflowRunner)


async def test_lean_runner_runs_each_snippet_compiled_once(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stock sandbox ``exec``s a few lines of source to enter itself (the workflow's import,
    then each activation); the lean runner hands it code compiled once per process."""
    given: list[object] = []
    stock = sandbox._StockInstance._run_code

    def recording(self: Any, code: Any, **extra: Any) -> None:
        given.append(code)
        stock(self, code, **extra)

    monkeypatch.setattr(sandbox._StockInstance, "_run_code", recording)
    await run_once(client, LeanSandboxedWorkflowRunner(), "compiled-a")
    first = len(given)
    await run_once(client, LeanSandboxedWorkflowRunner(), "compiled-b")
    assert first and len(given) > first
    assert all(isinstance(code, CodeType) for code in given), given
    # the second run's snippets are the very code objects compiled for the first
    assert {id(c) for c in given[first:]} <= {id(c) for c in given[:first]}


def test_compiled_snippets_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "_COMPILED", {})
    monkeypatch.setattr(sandbox, "MAX_COMPILED", 1)
    once = sandbox.compiled("x = 1")
    assert isinstance(once, CodeType) and sandbox.compiled("x = 1") is once
    assert sandbox.compiled("y = 2") == "y = 2"  # past the bound: compiled by exec again
    assert sandbox.compiled(once) is once
