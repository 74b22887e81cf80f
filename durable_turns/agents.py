"""Agent tools: a tool that is another agent (Think's ``agentTool()``).

    class Researcher(TurnHooks):
        system_prompt = "Research the topic you are given; end with a short summary."

    research = agent_tool(
        "research", Researcher, description="Research one topic in depth.",
        model="anthropic:claude-sonnet-4-5", tools=["search_web"],
    )

Put ``research`` in a tools module (``--tools``) like any ``@tool``. When the model calls it,
the parent turn runs one turn of a **child conversation** (``contract.agent_conversation_id``:
the parent's conversation, turn number and tool call id) as a child ``TurnWorkflow`` of its
own, with the agent's hooks, model, tools and system prompt, its own transcript and its own
history. The parent's tool call waits for it durably; the child's live chunks appear on the
parent's stream under the call (``agent-chunk`` events); the child's reply is the tool's
result. How it runs, and what it cannot do, is in docs/tools.md ("Agent tools").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from durable_turns.hooks.base import TurnHooks
from durable_turns.tools import Tool, ToolRegistry


class AgentTask(BaseModel):
    """The default input of an agent tool: the task, in words."""

    task: str = Field(description="What the sub-agent should do, in full: it sees nothing else.")


@dataclass(frozen=True)
class AgentSpec:
    """What a sub-agent runs with; ``None`` fields fall back to the worker's settings."""

    hooks: TurnHooks
    """The child's hooks (its ``system_prompt``, ``before_turn``, ``on_chunk``, …)."""
    model: str | None = None
    """A ``provider:model`` id for the child's turns (None: the worker's ``TURNS_MODEL``);
    the hooks' ``before_turn`` may still choose another."""
    system: str | None = None
    """The child's system prompt (None: the hooks' ``system_prompt``, or their session's)."""
    tools: tuple[str, ...] = ()
    """The tools the child is offered, by name: the worker's tools of those names, hidden
    ones (``@tool(default=False)``) included; nothing else of the worker's (no other tool,
    not the parent's defaults)."""
    max_steps: int | None = None
    """The child's step limit (None: the worker's ``TURNS_MAX_STEPS``)."""
    message: Callable[[BaseModel], str] | None = field(default=None, compare=False)
    """The child's first user message, from the call's validated input (None: the input's
    one string field when it has one, else its JSON)."""

    def task(self, args: BaseModel) -> str:
        """The child's first user message for a call's input."""
        if self.message is not None:
            return str(self.message(args))
        values = args.model_dump(mode="json")
        if len(values) == 1 and isinstance(next(iter(values.values())), str):
            return str(next(iter(values.values())))
        return json.dumps(values, ensure_ascii=False, sort_keys=True)


@dataclass
class AgentTool(Tool):
    """A tool whose call runs a sub-agent's turn (``agent_tool``); the worker never calls
    ``fn``: the workflow runs the child and records its reply as the result."""

    agent: AgentSpec | None = None

    @property
    def is_client_tool(self) -> bool:
        return False

    @property
    def streaming(self) -> bool:
        return False

    @property
    def blocking(self) -> bool:
        return False


def _never(**_: Any) -> Any:
    raise RuntimeError("an agent tool's call runs its sub-agent's turn, not a function")


def agent_tool(
    name: str,
    hooks: type[TurnHooks] | TurnHooks = TurnHooks,
    *,
    description: str = "",
    input_model: type[BaseModel] = AgentTask,
    model: str | None = None,
    system: str | None = None,
    tools: Sequence[str] = (),
    max_steps: int | None = None,
    message: Callable[[BaseModel], str] | None = None,
    default: bool = True,
    models: tuple[str, ...] | list[str] | str | None = None,
) -> AgentTool:
    """A tool that runs another agent (Think's ``agentTool(AgentClass, options)``).

    ``hooks`` is a ``TurnHooks`` subclass (or an instance) for the child; ``description``
    what the parent's model reads (default: the hooks class's docstring); ``input_model``
    the call's input (default ``AgentTask``: one ``task`` string). ``model``, ``system``,
    ``tools``, ``max_steps`` and ``message``: ``AgentSpec``. ``default`` and ``models`` mean
    what they mean for ``@tool``."""
    if isinstance(hooks, type):
        if not issubclass(hooks, TurnHooks):
            raise TypeError(f"agent tool {name!r}: hooks must be a TurnHooks subclass")
        instance = hooks()
    elif isinstance(hooks, TurnHooks):
        instance = hooks
    else:
        raise TypeError(f"agent tool {name!r}: hooks must be a TurnHooks subclass or instance")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"agent tool {name!r}: max_steps must be 1 or more")
    if isinstance(tools, str):
        raise TypeError(f"agent tool {name!r}: tools is a list of tool names, not one string")
    if name in tools:
        raise ValueError(f"agent tool {name!r} cannot offer itself to its sub-agent")
    offered = (models,) if isinstance(models, str) else (tuple(models) if models else None)
    spec = AgentSpec(
        hooks=instance,
        model=model,
        system=system,
        tools=tuple(tools),
        max_steps=max_steps,
        message=message,
    )
    return AgentTool(
        name=name,
        description=description
        or (type(instance) is not TurnHooks and (type(instance).__doc__ or "").strip())
        or f"Agent {name}.",
        input_model=input_model,
        fn=_never,
        retry_safe=True,
        timeout_s=300.0,
        default=default,
        models=offered,
        agent=spec,
    )


class AgentTools(ToolRegistry):
    """A sub-agent's tools: the worker's tools of the names its agent tool lists, looked up
    on every call (an MCP server's tools come and go), each offered to the child whatever
    its ``default``."""

    def __init__(self, tools: ToolRegistry, names: Sequence[str]) -> None:
        super().__init__()
        self._root = tools
        self._names = tuple(names)

    def get(self, name: str) -> Tool | None:
        return self._root.get(name) if name in self._names else None

    def names(self) -> list[str]:
        return [n for n in self._names if self._root.get(n) is not None]

    def defaults(self, model: str | None = None) -> list[str]:
        return [n for n in self.names() if (t := self._root.get(n)) and t.offered_to(model)]
