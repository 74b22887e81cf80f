"""A team's own workflows, run beside the engine's on one worker (the plugin's tests): kept in
a module of their own, which the SDK's sandbox re-imports for every run."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="team_greet")
async def team_greet(name: str) -> str:
    return f"hello, {name}"


@workflow.defn(name="TeamGreeting")
class TeamGreeting:
    """A team's workflow: one activity of its own; says whether it ran in the sandbox."""

    @workflow.run
    async def run(self, name: str) -> tuple[str, bool]:
        greeting = await workflow.execute_activity(
            team_greet, name, start_to_close_timeout=timedelta(seconds=10)
        )
        return greeting, workflow.unsafe.in_sandbox()
