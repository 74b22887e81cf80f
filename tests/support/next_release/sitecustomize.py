"""A stand-in for the next release, loaded by ``tests/test_rolling_deploy.py``'s worker.

With ``TURNS_NEXT_RELEASE_FIELD`` set, every payload this process encodes from one of the
engine's internal models (activity inputs and results, a turn's input and result: what
``contract.Internal`` covers) carries one field more than this release knows, at the top
level and in its ``turn`` reference: what a next release that adds a field to ``TurnRef`` or
to a step's result writes. Everything else it encodes is unchanged.
"""

from __future__ import annotations

import json
import os
import sys

INTERNAL = frozenset(
    {
        "TurnRef",
        "BeginTurnInput",
        "TurnPlan",
        "ModelStepInput",
        "StepSummary",
        "ToolCallInput",
        "ToolOutcome",
        "FinishTurnInput",
        "FailTurnInput",
        "CompactInput",
        "CompactResult",
        "ChatResponseInput",
        "TurnInput",
        "TurnResult",
    }
)

if os.environ.get("TURNS_NEXT_RELEASE_FIELD"):
    from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter

    _to_payload = PydanticJSONPlainPayloadConverter.to_payload

    def to_payload(self, value):  # type: ignore[no-untyped-def]
        payload = _to_payload(self, value)
        if payload is not None and type(value).__name__ in INTERNAL:
            data = json.loads(payload.data)
            data["added_by_the_next_release"] = {"any": "value"}
            if isinstance(data.get("turn"), dict):
                data["turn"]["added_by_the_next_release"] = 1
            payload.data = json.dumps(data, separators=(",", ":")).encode()
        return payload

    PydanticJSONPlainPayloadConverter.to_payload = to_payload  # type: ignore[method-assign]
    print("TURNS_NEXT_RELEASE_FIELD: internal payloads carry a field more", file=sys.stderr)
