"""What a worker's log says of a turn that fails on something the user must fix (issue 34,
item 9): one line with the typed error, no traceback (tracebacks are for the engine's own
faults, and the user's own code). A real worker process."""

from __future__ import annotations

from tests.support.harness import Harness


async def test_errors_the_user_must_fix_are_one_line_each(harness: Harness) -> None:
    worker = harness.start_worker(ANTHROPIC_API_KEY="", ANTHROPIC_AUTH_TOKEN="")
    cases = {
        "no-key": ("anthropic:claude-test-model", "ProviderError: No Anthropic credentials"),
        "no-provider": ("nosuch:model", "InvalidModel: unknown model provider 'nosuch'"),
        "bad-id": ("anthropic:", "InvalidModel: "),
    }
    failed = {}
    for name, (model, _) in cases.items():
        result = await harness.send(harness.conv(name), "hi", model=model)
        assert result.status == "error" and result.error is not None
        failed[name] = result.workflow_id
    # a turn that completes, after them: every failure's line is written by now
    assert (await harness.send(harness.conv("ok"), "hi")).status == "completed"
    log = worker.log_tail(1_000_000)
    assert "Traceback" not in log
    assert "Completing activity as failed" not in log
    for name, (_, said) in cases.items():
        lines = [line for line in log.splitlines() if failed[name] in line]
        assert len(lines) == 1, lines
        assert said in lines[0] and "(attempt 1)" in lines[0], lines[0]
