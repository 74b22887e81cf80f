"""``model_step`` as the worker registers it: the step (``activities.model_step``), then,
when the step ends the turn, the turn's finish in the same activity.

A turn whose workflow passes ``ModelStepInput.finish`` learns from
its last model step's result that the turn is finished (``StepSummary.result``), and runs no
``finish_turn`` local activity after it: one workflow task fewer that records a marker, one
billable action fewer on Temporal Cloud (docs/costs.md). Only a step that calls no tool and
ended ``ok`` finishes its turn, and only when ``finish_turn`` would run none of the user's
code (``FinishActivities.finish_here``): the last ``on_step_finish`` keeps its own local
activity, where its failures and crash budget are as docs/hooks.md says.
"""

from __future__ import annotations

from temporalio import activity

from durable_turns.activities.finish import FinishActivities
from durable_turns.activities.model_step import ModelStepActivities
from durable_turns.contract import MODEL_STEP, ModelStepInput, StepSummary


class LastStepActivities:
    def __init__(self, steps: ModelStepActivities, finish: FinishActivities) -> None:
        self.steps = steps
        self.finish = finish

    @activity.defn(name=MODEL_STEP)
    async def model_step(self, inp: ModelStepInput) -> StepSummary:
        """One model call (``ModelStepActivities.model_step``); a step that ends the turn
        also finishes it when asked to and it can."""
        summary = await self.steps.model_step(inp)
        if inp.finish is None or summary.outcome != "ok" or summary.tool_calls:
            return summary
        result = await self.finish.finish_here(inp.finish)
        return summary if result is None else summary.model_copy(update={"result": result})
