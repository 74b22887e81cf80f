"""Updates too large for a worker to answer: taken out of an activation before a workflow runs.

Temporal's update protocol echoes an update's whole request (its arguments and headers) in
the worker's answer, a rejection as much as an acceptance (``Rejection.rejected_request``,
``Acceptance.accepted_request``). The server checks that answer against the namespace's blob
size limit (2 MiB by default) and ends the workflow when it is over; temporalio's core checks
it before sending and fails the workflow task instead (``[TMPRL1103] … PayloadsTooLarge``).
The server keeps the update and delivers it again to every retry of the task, and meanwhile
refuses every other update of the workflow ("Workflow Task in failed state"), until the
caller of the large one gives up (about 20 s). No validator can help: its rejection is the
answer that is too large.

So an update whose request could not be answered is taken out of the activation before the
workflow sees it (:func:`drop_unanswerable_updates`, run by the worker's sandbox runner on
every activation): the worker answers nothing for it, the server rejects it when the task
completes (``UnprocessedUpdate``, non-retryable: its caller learns at once) and the task
completes as if it had not come. Smaller oversized requests (over ``MAX_REQUEST_BYTES`` but
answerable) still reach the validators and get their typed ``RequestTooLarge``.

Only new updates are looked at (``run_validator``): an update that history says was accepted
fitted in its answer, and replay must see it.
"""

from __future__ import annotations

import logging
from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation

log = logging.getLogger("durable_turns.intake")

DEFAULT_BLOB_LIMIT = 2 * 1024 * 1024
"""Temporal's default ``limit.blobSize.error`` (and Temporal Cloud's), when the namespace
does not say."""

ANSWER_MARGIN = 64 * 1024
"""What an answer adds to the request it echoes (the failure with its stack trace, ids), with
room to spare."""

LOGGED = 3
"""Refusals logged one by one per process; after that, one line per hundred."""

_refused = 0


def answerable_bytes(blob_limit: int | None) -> int:
    """The largest update (arguments and headers, as the activation holds them) whose answer
    fits the namespace's blob size limit."""
    limit = blob_limit if blob_limit and blob_limit > 0 else DEFAULT_BLOB_LIMIT
    return max(limit - ANSWER_MARGIN, limit // 2)


def drop_unanswerable_updates(act: WorkflowActivation, limit: int) -> int:
    """Take the new updates larger than ``limit`` bytes out of ``act``; how many it took."""
    jobs: Any = act.jobs
    dropped = 0
    i = 0
    while i < len(jobs):
        job = jobs[i]
        if job.HasField("do_update") and job.do_update.run_validator:
            size = job.do_update.ByteSize()
            if size > limit:
                _note(act.run_id, job.do_update.name, job.do_update.id, size, limit)
                del jobs[i]
                dropped += 1
                continue
        i += 1
    return dropped


def _note(run_id: str, name: str, update_id: str, size: int, limit: int) -> None:
    global _refused
    _refused += 1
    if _refused <= LOGGED:
        log.warning(
            "refused update %r (id %s, run %s): %d bytes, over the %d a worker can answer;"
            " Temporal rejects it as UnprocessedUpdate",
            name[:100],
            update_id[:100],
            run_id,
            size,
            limit,
        )
    elif _refused % 100 == 0:
        log.warning("%d oversized updates refused so far", _refused)
