"""Tools: async Python functions with a pydantic input model.

    class WeatherArgs(BaseModel):
        city: str

    @tool
    async def get_weather(args: WeatherArgs, ctx: ToolContext) -> str:
        '''Current weather for a city.'''
        ...

The input model's JSON schema goes to the model; the docstring is the description. A
parameter annotated ``ToolContext`` receives the call's context, whose ``tool_call_id`` is
an idempotency key (a tool that was running when its worker died runs again with the same
id, unless it says ``retry_safe=False``). A tool written as an async generator streams
preliminary results (``on_chunk`` sees each as a ``tool-result`` chunk with
``preliminary=True``); its last value is the output. A tool declared with ``client=True`` has
no executor: the client runs it and sends the result back.

Point a worker at a module of tools with ``--tools module`` (env ``TURNS_TOOLS``): every
``Tool`` at the module's top level is registered.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from pydantic import BaseModel, create_model

from durable_turns.messages import ToolSpec


@dataclass
class ToolContext:
    """What a running tool knows of its call."""

    tool_call_id: str
    tool_name: str
    conversation_id: str
    turn_number: int
    request_id: str
    step_number: int
    attempt: int = 1
    heartbeat: Callable[..., None] = lambda *details: None
    experimental_context: Any = None
    """What ``before_step`` set as ``experimental_context`` for this step or an earlier one."""


@dataclass
class Tool:
    name: str
    description: str
    input_model: type[BaseModel]
    fn: Callable[..., Any] | None = None
    retry_safe: bool = True
    """False: after a crash mid-run the model gets an "interrupted" error instead of a rerun."""
    needs_approval: bool = False
    timeout_s: float = 300.0
    default: bool = True
    """False: the tool is offered only when ``TurnConfig.tools`` names it."""
    _context_param: str | None = field(default=None, repr=False)
    _input_param: str | None = field(default=None, repr=False)

    @property
    def is_client_tool(self) -> bool:
        return self.fn is None

    @property
    def streaming(self) -> bool:
        return self.fn is not None and inspect.isasyncgenfunction(self.fn)

    @functools.cached_property
    def spec(self) -> ToolSpec:
        """What the model sees (built once: every model step offers it)."""
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(name=self.name, description=self.description, input_schema=schema)

    def call_args(self, args: BaseModel, ctx: ToolContext) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self._input_param:
            kwargs[self._input_param] = args
        if self._context_param:
            kwargs[self._context_param] = ctx
        return kwargs

    async def run(
        self,
        args: BaseModel,
        ctx: ToolContext,
        on_preliminary: Callable[[Any], Awaitable[None]] | None = None,
    ) -> Any:
        """Execute the tool. A streaming tool's values go to ``on_preliminary`` as they come
        (each one heartbeats); its last value is the output."""
        if self.fn is None:
            raise RuntimeError(f"tool {self.name!r} runs on the client")
        kwargs = self.call_args(args, ctx)
        if not self.streaming:
            return await self.fn(**kwargs)
        last: Any = None
        async for value in self.fn(**kwargs):
            last = value
            ctx.heartbeat()
            if on_preliminary is not None:
                await on_preliminary(value)
        return last


_EMPTY_INPUT = create_model("EmptyInput")


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    retry_safe: bool = True,
    needs_approval: bool = False,
    timeout_s: float = 300.0,
    default: bool = True,
) -> Any:
    """Make a ``Tool`` of an async function (usable bare or with options)."""

    def wrap(f: Callable[..., Any]) -> Tool:
        if not (inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f)):
            raise TypeError(f"tool {f.__name__!r} must be an async function or async generator")
        hints = get_type_hints(f)
        input_model: type[BaseModel] = _EMPTY_INPUT
        input_param = context_param = None
        for param in inspect.signature(f).parameters:
            hint = hints.get(param)
            if hint is ToolContext:
                context_param = param
            elif isinstance(hint, type) and issubclass(hint, BaseModel):
                input_model, input_param = hint, param
            else:
                raise TypeError(
                    f"tool {f.__name__!r}: parameter {param!r} must be annotated with a"
                    " pydantic model (the input) or ToolContext"
                )
        return Tool(
            name=name or f.__name__,
            description=description or inspect.getdoc(f) or "",
            input_model=input_model,
            fn=f,
            retry_safe=retry_safe,
            needs_approval=needs_approval,
            timeout_s=timeout_s,
            default=default,
            _context_param=context_param,
            _input_param=input_param,
        )

    return wrap(fn) if fn is not None else wrap


def client_tool(
    name: str, input_model: type[BaseModel] = _EMPTY_INPUT, description: str = ""
) -> Tool:
    """A tool the client executes: the turn waits for its result."""
    return Tool(name=name, description=description, input_model=input_model, fn=None)


class ToolRegistry:
    """The tools a worker can run, by name."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools or []:
            self.add(t)

    def add(self, t: Tool) -> None:
        if t.name in self._tools and self._tools[t.name] is not t:
            raise ValueError(f"two tools are named {t.name!r}")
        self._tools[t.name] = t

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def defaults(self) -> list[str]:
        return [n for n, t in self._tools.items() if t.default]

    def load_module(self, module_name: str) -> None:
        """Register every ``Tool`` defined at the top level of a module."""
        module = importlib.import_module(module_name)
        found = [v for v in vars(module).values() if isinstance(v, Tool)]
        if not found:
            raise ValueError(f"module {module_name!r} defines no tools (use the @tool decorator)")
        for t in found:
            self.add(t)
