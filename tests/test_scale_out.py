"""Several worker processes on one task queue share a burst; each conversation stays serial."""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType

from tests.support.harness import Harness


async def test_two_workers_share_a_burst_and_keep_turns_serial(harness: Harness) -> None:
    workers = [harness.start_worker(), harness.start_worker()]
    model = harness.script([{"text": "one two three four", "delay_ms": 40}])
    conversations = [harness.conv(f"burst{i}") for i in range(12)]
    requests = []
    for conversation in conversations:
        for text in ("first", "second"):
            requests.append(
                (conversation, await harness.turns.submit(conversation, text, model=model))
            )
    results = await asyncio.wait_for(
        asyncio.gather(*(harness.turns.wait(c, r) for c, r in requests)), 120
    )
    assert all(r.status == "completed" for r in results)

    identities: set[str] = set()
    store = await harness.store()
    for conversation in conversations:
        first = await harness.client.get_workflow_handle(f"{conversation}/turn-1").describe()
        second = await harness.client.get_workflow_handle(f"{conversation}/turn-2").describe()
        assert first.close_time is not None and second.start_time >= first.close_time
        messages = await store.messages(conversation)
        assert [m.text for m in messages] == [
            "first",
            "one two three four",
            "second",
            "one two three four",
        ]
        for n in (1, 2):
            history = await harness.client.get_workflow_handle(
                f"{conversation}/turn-{n}"
            ).fetch_history()
            identities.update(
                e.activity_task_started_event_attributes.identity
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            )
    pids = {str(w.proc.pid) for w in workers}
    assert {i.split("@")[0] for i in identities} == pids, "both workers ran activities"
