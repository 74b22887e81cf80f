"""The client's bound on an update's size: what a worker could not answer is never sent.

Temporal's update protocol echoes an update's whole request in the worker's answer, a
rejection as much as an acceptance. An update whose request is near the namespace's blob size
limit (2 MiB by default) cannot be answered at all: the SDK's core fails the workflow task
before sending the answer (``[TMPRL1103] … PayloadsTooLarge``), the server hands the same
update to every retry, and meanwhile refuses the workflow's other updates, until the large
one's caller gives up. No validator can help (its rejection is the answer that is too large),
and the engine rewrites no activation to hide it from the workflow.

So a client with the plugin (``TurnsClient``, ``turns``, the front door, a team's own client
given ``DurableTurnsPlugin``) refuses such an update before it is sent, with the same error a
validator's rejection gives (``WorkflowUpdateFailedError`` whose cause is an
``ApplicationError`` of type ``RequestTooLarge``). A client without the plugin is not bounded
here: ``docs/limits.md`` says what its oversized update costs.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import (
    Interceptor,
    OutboundInterceptor,
    StartWorkflowUpdateInput,
    StartWorkflowUpdateWithStartInput,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
)
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ApplicationError

from durable_turns.contract import MAX_REQUEST_BYTES, REQUEST_TOO_LARGE

DEFAULT_BLOB_LIMIT = 2 * 1024 * 1024
"""Temporal's default ``limit.blobSize.error`` (and Temporal Cloud's)."""

ANSWER_MARGIN = 64 * 1024
"""What an answer adds to the request it echoes (the failure with its stack trace, ids), with
room to spare."""


def answerable_bytes(blob_limit: int | None = None) -> int:
    """The largest update (its encoded arguments and headers) whose answer fits the namespace's
    blob size limit (None: Temporal's default, 2 MiB)."""
    limit = blob_limit if blob_limit and blob_limit > 0 else DEFAULT_BLOB_LIMIT
    return max(limit - ANSWER_MARGIN, limit // 2)


class UpdateSizeBound(Interceptor):
    """Refuses, before sending, an update whose encoded arguments and headers are over
    ``limit`` bytes (:func:`answerable_bytes`). What it costs an update: one more encode of its
    arguments with ``payload_converter`` (the SDK encodes them again to send them)."""

    def __init__(self, payload_converter: PayloadConverter, limit: int | None = None) -> None:
        self.payload_converter = payload_converter
        self.limit = limit if limit is not None else answerable_bytes()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Bounded(next, self)


class _Bounded(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, bound: UpdateSizeBound) -> None:
        super().__init__(next)
        self.bound = bound

    def _check(self, name: str, args: Any, headers: Any) -> None:
        size = sum(len(p.SerializeToString()) for p in headers.values()) if headers else 0
        if args:
            size += sum(p.ByteSize() for p in self.bound.payload_converter.to_payloads(args))
        if size > self.bound.limit:
            raise WorkflowUpdateFailedError(
                ApplicationError(
                    f"update {name[:100]!r} is {size} bytes; a worker can answer at most"
                    f" {self.bound.limit} (requests are limited to {MAX_REQUEST_BYTES}):"
                    " send large content by reference (a URL or a file id).",
                    type=REQUEST_TOO_LARGE,
                    non_retryable=True,
                )
            )

    async def start_workflow_update(
        self, input: StartWorkflowUpdateInput
    ) -> WorkflowUpdateHandle[Any]:
        self._check(input.update, input.args, input.headers)
        return await super().start_workflow_update(input)

    async def start_update_with_start_workflow(
        self, input: StartWorkflowUpdateWithStartInput
    ) -> WorkflowUpdateHandle[Any]:
        update = input.update_workflow_input
        self._check(update.update, update.args, update.headers)
        return await super().start_update_with_start_workflow(input)


def update_bound(blob_limit: int | None = None) -> UpdateSizeBound:
    """The bound for a client built with the engine's data converter
    (``codec.data_converter_from_env``): what ``TurnsClient.connect`` and the worker's client
    add to their interceptors."""
    from durable_turns.codec import PYDANTIC_DATA_CONVERTER

    return UpdateSizeBound(PYDANTIC_DATA_CONVERTER.payload_converter, answerable_bytes(blob_limit))
