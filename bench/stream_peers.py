"""The peers' streaming paths, for ``bench.ttft`` and ``bench.pace``: their worker entry point,
``bench.ttft``'s client, and the driver's side of both.

    python -m bench.stream_peers worker PEER TASK_QUEUE BATCH_MS [tools]
        (env TEMPORAL_ADDRESS; OPENAI_BASE_URL or ANTHROPIC_BASE_URL: the local mock)
    python -m bench.stream_peers client ADDRESS

Both commands run only in the peers' venv (``bench/peers.py``). ``PEER`` is
``openai-agents`` (``bench.stream_peer_openai_agents``) or ``pydantic-ai``
(``bench.stream_peer_pydantic_ai``): each peer's workflow is a module of its own (a workflow
sandbox re-imports a workflow's module, and neither plugin passes the other's modules
through). ``BATCH_MS`` is the interval at which the worker's activity flushes its publishes
to the stream; with ``tools`` the agent has ``get_weather`` (``bench.pace``'s 3-step turn),
without, none (``bench.ttft``'s 1-step text turn). Both are the worker's, not the
workflow's: pydantic-ai's agent is built, its tools with it, when the module is imported. A
worker is a process of its own, as the engine's is; it prints ``stream peer worker ready``
once it polls and stops on SIGTERM (``peer_worker`` starts one from the project's
interpreter).

The client is ``bench.ttft``'s (the peers' packages decode their events): it reads one JSON
request a line, ``{"peer", "queue", "kind", "cooldown_ms"}``, runs that 1-step text turn and
answers ``TOOK <seconds>`` (its own clock: from its call to the first text at it) or ``ERROR
<why>``. ``kind`` ``first`` is the conversation's first workflow (no prior messages);
``warm`` is a later turn's, with the prior exchange as input (a peer turn is one workflow
with the conversation passed in, as in ``bench.peers``). ``Peers`` is the driver's side
(``bench.ttft``, on the project's interpreter): it starts a worker per peer and
configuration, and the client, and asks it for one turn at a time, so the peers' rounds
interleave with the other paths'. ``CONFIGS``: ``bench.ttft``'s, each peer with its
defaults (the stream flushed every 100 ms, the subscriber's poll cooldown 100 ms: both
integrations' defaults) and tuned to 10 ms each (documented settings:
``streaming_batch_interval``, ``WorkflowStreamTopic.batch_interval``, ``poll_cooldown``).
``bench.pace`` starts the same workers, with ``tools`` and its own tunings, and subscribes
to ``TOPIC`` from the project's interpreter.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.common import ROOT, WorkerProcess, serve_worker

MODULES = {
    "openai-agents": "bench.stream_peer_openai_agents",
    "pydantic-ai": "bench.stream_peer_pydantic_ai",
}
WORKFLOWS = {"openai-agents": "OpenAIAgentsStreamedTurn", "pydantic-ai": "PydanticAIStreamedTurn"}
"""Each peer's workflow: ``(prompt, prior messages)``."""
TOPIC = "events"
TIMEOUT = timedelta(seconds=60)
KEY = "bench-key"
BATCH_ENV, TOOLS_ENV = "STREAM_PEER_BATCH_MS", "STREAM_PEER_TOOLS"
READY = "stream peer worker ready"
PRIOR = [
    {"role": "user", "text": "hello"},
    {"role": "assistant", "text": "Hello! How can I help you today?"},
    {"role": "user", "text": "what is a durable turn?"},
    {"role": "assistant", "text": "A chat turn that survives a crash of the process running it."},
]
"""A warm turn's prior conversation."""


CONFIGS = {"defaults": (100.0, 100.0), "tuned": (10.0, 10.0)}
"""``bench.ttft``'s per configuration: the worker's flush interval and the client's poll
cooldown (ms)."""
FIXTURES = {"openai-agents": "openai/responses_text.sse", "pydantic-ai": "anthropic/text_basic.sse"}
"""Each peer's wire format at the local mock (``testkit/llm_server.py``)."""


def batch_interval() -> timedelta:
    """The worker's flush interval (``BATCH_ENV``, set by ``serve``; default 100 ms, both
    integrations' own)."""
    return timedelta(milliseconds=float(os.environ.get(BATCH_ENV, "100")))


def with_tools() -> bool:
    """Whether the worker's agent has ``get_weather`` (``TOOLS_ENV``, set by ``serve``)."""
    return os.environ.get(TOOLS_ENV) == "1"


def peer_worker(
    python: str,
    peer: str,
    queue: str,
    batch_ms: float,
    log: Path,
    env: dict[str, str],
    tools: bool = False,
) -> WorkerProcess:
    """A peer's worker process (``python``: the peers' venv's), started; ``ready_worker``
    waits until it polls."""
    cmd = [python, "-m", "bench.stream_peers", "worker", peer, queue, str(batch_ms)]
    cmd += ["tools"] if tools else []
    environ = {**env, "PYTHONPATH": str(ROOT), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    return WorkerProcess(cmd, environ, log, READY)


class Peers:
    """``bench.ttft``'s peers: their workers and client, in the peers' venv (``python``)."""

    def __init__(self, python: str, address: str, tmp: Path, env: dict[str, str]) -> None:
        self.queues: dict[tuple[str, str], str] = {}
        self.workers: list[WorkerProcess] = []
        self._env = {**env, "TEMPORAL_ADDRESS": address, "PYTHONPATH": str(ROOT)}
        for name in MODULES:
            for config, (batch_ms, _) in CONFIGS.items():
                queue = f"ttft-{name}-{config}-{uuid.uuid4().hex[:6]}"
                log = tmp / f"peer-{name}-{config}.log"
                self.workers.append(peer_worker(python, name, queue, batch_ms, log, self._env))
                self.queues[name, config] = queue
        self._cmd = [python, "-m", "bench.stream_peers", "client", address]
        self._log = tmp / "peers-client.log"
        self._stderr = open(self._log, "ab")  # closed in stop()
        self._client: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        for worker in self.workers:
            await asyncio.to_thread(worker.wait_ready)
        self._client = await asyncio.create_subprocess_exec(
            *self._cmd,
            cwd=ROOT,
            env=self._env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr,
        )
        await asyncio.wait_for(self._line(), 90)

    async def _line(self) -> str:
        assert self._client and self._client.stdout
        line = (await self._client.stdout.readline()).decode().strip()
        if not line:
            tail = self._log.read_bytes()[-2000:].decode(errors="replace")
            raise RuntimeError(f"the peers' client ended: {tail}")
        return line

    async def turn(self, name: str, config: str, kind: str) -> float:
        """Seconds from the client's call to the first text at it (the client's clock)."""
        assert self._client and self._client.stdin
        request = {
            "peer": name,
            "queue": self.queues[name, config],
            "kind": kind,
            "cooldown_ms": CONFIGS[config][1],
        }
        self._client.stdin.write((json.dumps(request) + "\n").encode())
        await self._client.stdin.drain()
        answer = await asyncio.wait_for(self._line(), 60)
        if not answer.startswith("TOOK "):
            raise RuntimeError(answer)
        return float(answer[len("TOOK ") :])

    async def stop(self) -> None:
        if self._client and self._client.returncode is None:
            assert self._client.stdin
            self._client.stdin.close()
            try:
                await asyncio.wait_for(self._client.wait(), 10)
            except TimeoutError:
                self._client.kill()
                await self._client.wait()
        self._stderr.close()
        for worker in self.workers:
            await asyncio.to_thread(worker.stop)


# --- in the peers' venv ------------------------------------------------------------------------


def peer(name: str) -> ModuleType:
    return importlib.import_module(MODULES[name])


async def serve(name: str, task_queue: str, batch_ms: float, tools: bool) -> None:
    """A peer's worker until SIGTERM, its activity flushing every ``batch_ms``."""
    os.environ[BATCH_ENV] = str(batch_ms)  # before the import: pydantic-ai's agent reads them
    os.environ[TOOLS_ENV] = "1" if tools else ""
    module = peer(name)
    client = await module.connect(os.environ["TEMPORAL_ADDRESS"], worker=True)
    await serve_worker(module.worker(client, task_queue), READY)


async def first_text(
    name: str, client: Any, queue: str, workflow_id: str, prior: list[Any], cooldown_ms: float
) -> float:
    """Seconds from the call to the first text of a 1-step turn; then the turn is awaited
    (read to its end first where the peer's subscriber acknowledges it: ``READ_TO_END``)."""
    module = peer(name)
    began = time.perf_counter()
    handle = await client.start_workflow(
        WORKFLOWS[name], args=["hi", prior], id=workflow_id, task_queue=queue
    )
    took: float | None = None
    async for event in module.events(client, handle, timedelta(milliseconds=cooldown_ms)):
        if took is None and module.is_text(event):
            took = time.perf_counter() - began
            if not module.READ_TO_END:
                break
    await handle.result()
    if took is None:
        raise RuntimeError("the stream ended without text")
    return took


async def drive(address: str) -> None:
    """Answer ``bench.ttft``'s turn requests, one a line, until stdin closes."""
    clients = {name: await peer(name).connect(address, worker=False) for name in MODULES}
    loop = asyncio.get_running_loop()
    print("stream peers client ready", flush=True)
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        request = json.loads(line)
        name = request["peer"]
        prior = PRIOR if request["kind"] == "warm" else []
        workflow_id = f"ttft-{name}-{request['kind']}-{uuid.uuid4().hex[:10]}"
        try:
            took = await first_text(
                name, clients[name], request["queue"], workflow_id, prior, request["cooldown_ms"]
            )
            print(f"TOOK {took!r}", flush=True)
        except Exception as exc:  # the driver notes it on the peer's row
            print(f"ERROR {type(exc).__name__}: {exc}".replace("\n", " ")[:500], flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        asyncio.run(serve(sys.argv[2], sys.argv[3], float(sys.argv[4]), "tools" in sys.argv[5:]))
    else:
        asyncio.run(drive(sys.argv[2]))
    sys.stdout.flush()
    os._exit(0)  # temporalio on 3.11 can crash at interpreter exit
