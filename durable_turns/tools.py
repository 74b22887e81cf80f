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

A tool may also be a plain ``def``: it runs in a thread of its own pool (``SYNC_TOOL_THREADS``
at most), so blocking code (``time.sleep``, a blocking HTTP client) never stalls the worker's
event loop. An ``async def`` tool runs on a user loop of its own (an event loop on its own
thread, see docs/operations.md), so one that blocks delays only its own turn, and the worker
logs it by name; ``isolated=False`` runs it on the worker's loop instead (no thread hop, for a
tool that uses an object bound to that loop; it must then never block).

``timeout_s`` (default 300) bounds each run: a tool that overruns gets a ``ToolTimeout``
error result the model sees (a plain ``def`` tool's thread runs on until it returns; its
result is dropped). ``retries`` (default 0) re-runs a tool that timed out or raised, as a new
activity attempt visible in the workflow history (at most 2: three attempts in all), never
for a ``retry_safe=False`` tool. ``models=("demo",)`` offers a tool only to those model
providers (or full ``provider:model`` ids).

Point a worker at a module of tools with ``--tools module`` (env ``TURNS_TOOLS``): every
``Tool`` at the module's top level is registered.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import importlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from pydantic import BaseModel, create_model

from durable_turns.entry import lazy_pool
from durable_turns.errors import ToolFailed as ToolFailed
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
    """Each run's limit: an overrun is a ``ToolTimeout`` error result (or a retry)."""
    default: bool = True
    """False: the tool is offered only when ``TurnConfig.tools`` names it."""
    retries: int = 0
    """Re-runs (new activity attempts) after a timeout or an exception; 0: the model is told."""
    models: tuple[str, ...] | None = None
    """Providers (``"demo"``) or ``provider:model`` ids this tool is offered to (None: all)."""
    isolated: bool = True
    """An ``async def`` tool runs on a user loop (True) or on the worker's own loop (False)."""
    _context_param: str | None = field(default=None, repr=False)
    _input_param: str | None = field(default=None, repr=False)

    @property
    def is_client_tool(self) -> bool:
        return self.fn is None

    @property
    def streaming(self) -> bool:
        return self.fn is not None and inspect.isasyncgenfunction(self.fn)

    @property
    def blocking(self) -> bool:
        """A plain ``def``: it runs in a thread, off the event loop."""
        return self.fn is not None and not (
            inspect.iscoroutinefunction(self.fn) or inspect.isasyncgenfunction(self.fn)
        )

    def offered_to(self, model: str | None) -> bool:
        """Whether a step of ``model`` (a ``provider:model`` id; None: unknown) is offered it."""
        if self.models is None or model is None:
            return True
        return model in self.models or model.partition(":")[0] in self.models

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
        if self.blocking:
            if self._context_param:
                kwargs[self._context_param] = dataclasses.replace(
                    ctx, heartbeat=_thread_safe(ctx.heartbeat)
                )
            call = functools.partial(contextvars.copy_context().run, self.fn, **kwargs)
            return await asyncio.get_running_loop().run_in_executor(sync_tool_executor(), call)
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

SYNC_TOOL_THREADS = 32
"""At most this many plain-``def`` tools run at once on a worker; more wait for a thread."""
sync_tool_executor = lazy_pool(SYNC_TOOL_THREADS, "turns-tool")
"""The plain-``def`` tools' pool, made on first use."""


def _thread_safe(heartbeat: Callable[..., None]) -> Callable[..., None]:
    """``ctx.heartbeat`` for a tool running in a thread: the beat is sent from the loop."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()

    def beat(*details: Any) -> None:
        loop.call_soon_threadsafe(functools.partial(context.run, heartbeat, *details))

    return beat


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    retry_safe: bool = True,
    needs_approval: bool = False,
    timeout_s: float = 300.0,
    default: bool = True,
    retries: int = 0,
    models: tuple[str, ...] | list[str] | str | None = None,
    isolated: bool = True,
) -> Any:
    """Make a ``Tool`` of a function (usable bare or with options): ``async def``, an async
    generator (streaming), or a plain ``def`` (run in a thread)."""
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    if retries < 0:
        raise ValueError("retries must be 0 or more")
    offered = (models,) if isinstance(models, str) else (tuple(models) if models else None)

    def wrap(f: Callable[..., Any]) -> Tool:
        if inspect.isgeneratorfunction(f):
            raise TypeError(
                f"tool {f.__name__!r}: a streaming tool must be an async generator (async def)"
            )
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
            retries=retries,
            models=offered,
            isolated=isolated,
            _context_param=context_param,
            _input_param=input_param,
        )

    return wrap(fn) if fn is not None else wrap


def client_tool(
    name: str, input_model: type[BaseModel] = _EMPTY_INPUT, description: str = ""
) -> Tool:
    """A tool the client executes: the turn waits for its result."""
    return Tool(name=name, description=description, input_model=input_model, fn=None)


def _is_demo_tool(t: Tool) -> bool:
    return getattr(t.fn, "__module__", "") == "durable_turns.demo_tools"


class ToolRegistry:
    """The tools a worker can run, by name: its own (in the order they were added), then
    each group's (MCP servers': by group name, then tool name, whatever order they came in),
    so the tool list a model sees is the same on every worker and every refresh."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._groups: dict[str, dict[str, Tool]] = {}
        self._all: dict[str, Tool] = {}
        for t in tools or []:
            self.add(t)

    def add(self, t: Tool) -> None:
        """Register ``t``; a worker's own tool replaces a built-in demo tool of its name."""
        existing = self._tools.get(t.name)
        if existing is not None and existing is not t and not _is_demo_tool(existing):
            raise ValueError(f"two tools are named {t.name!r}")
        if any(t.name in g for g in self._groups.values()):
            raise ValueError(f"two tools are named {t.name!r}")
        self._tools[t.name] = t
        self._index()

    def set_group(self, group: str, tools: Sequence[Tool]) -> None:
        """Replace the tools of ``group`` (an MCP server's) with ``tools``; a name taken by
        one of the worker's own tools is an error."""
        clash = sorted(t.name for t in tools if t.name in self._tools)
        if clash:
            raise ValueError(f"tools {clash} of {group!r} have the names of the worker's own tools")
        self._groups[group] = {t.name: t for t in sorted(tools, key=lambda t: t.name)}
        self._index()

    def _index(self) -> None:
        merged = dict(self._tools)
        for group in sorted(self._groups):
            merged.update(self._groups[group])
        self._all = merged

    def get(self, name: str) -> Tool | None:
        return self._all.get(name)

    def names(self) -> list[str]:
        return list(self._all)

    def defaults(self, model: str | None = None) -> list[str]:
        """The tools every step of ``model`` is offered (None: the model is not known)."""
        return [n for n, t in self._all.items() if t.default and t.offered_to(model)]

    def load_module(self, module_name: str) -> None:
        """Register every ``Tool`` defined at the top level of a module."""
        module = importlib.import_module(module_name)
        found = [v for v in vars(module).values() if isinstance(v, Tool)]
        if not found:
            raise ValueError(f"module {module_name!r} defines no tools (use the @tool decorator)")
        for t in found:
            self.add(t)
