"""The peers' streaming paths for ``bench.ttft``: a worker and a client, in the peers' venv.

    python -m bench.ttft_peers worker PEER TASK_QUEUE BATCH_MS
        (env TEMPORAL_ADDRESS; OPENAI_BASE_URL or ANTHROPIC_BASE_URL: the local mock)
    python -m bench.ttft_peers client ADDRESS

``PEER`` is ``openai-agents`` (``bench.ttft_peer_openai``) or ``pydantic-ai``
(``bench.ttft_peer_pydantic``); ``BATCH_MS`` is the stream's flush interval in the worker's
activity. A worker is a process of its own, as the engine's is; it prints ``ttft peer worker
ready`` once it polls and stops on SIGTERM. The client (the peers' packages decode their
events) reads one JSON request a line, ``{"peer", "queue", "kind", "cooldown_ms"}``, runs that
turn and answers ``TOOK <seconds>`` (its own clock: from its call to the first text at it) or
``ERROR <why>``. ``kind`` ``first`` is the conversation's first workflow (no prior messages);
``warm`` is a later turn's, with the prior exchange as input (a peer turn is one workflow with
the conversation passed in, as in ``bench.peers``).

``Peers`` is the driver's side (``bench.ttft``, on the project's interpreter): it starts a
worker per peer and configuration, and the client, and asks it for one turn at a time, so the
peers' rounds interleave with the other paths'. ``CONFIGS``: each peer with its defaults
(the stream flushed every 100 ms, the subscriber's poll cooldown 100 ms: both integrations'
defaults) and tuned to 10 ms each (documented settings: ``streaming_batch_interval``,
``WorkflowStreamTopic.batch_interval``, ``poll_cooldown``).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.common import ROOT, WorkerProcess

MODULES = {"openai-agents": "bench.ttft_peer_openai", "pydantic-ai": "bench.ttft_peer_pydantic"}
READY = "ttft peer worker ready"
PRIOR = [
    {"role": "user", "text": "hello"},
    {"role": "assistant", "text": "Hello! How can I help you today?"},
    {"role": "user", "text": "what is a durable turn?"},
    {"role": "assistant", "text": "A chat turn that survives a crash of the process running it."},
]
"""A warm turn's prior conversation."""


CONFIGS = {"defaults": (100.0, 100.0), "tuned": (10.0, 10.0)}
"""Per configuration: the worker's flush interval and the client's poll cooldown (ms)."""
FIXTURES = {"openai-agents": "openai/responses_text.sse", "pydantic-ai": "anthropic/text_basic.sse"}
"""Each peer's wire format at the local mock (``tests/llm_server.py``)."""


class Peers:
    """The peers' workers and client, in the peers' venv (``python``), for ``bench.ttft``."""

    def __init__(self, python: str, address: str, tmp: Path, env: dict[str, str]) -> None:
        self.queues: dict[tuple[str, str], str] = {}
        self.workers: list[WorkerProcess] = []
        env = {**env, "TEMPORAL_ADDRESS": address, "PYTHONPATH": str(ROOT)}
        for name in MODULES:
            for config, (batch_ms, _) in CONFIGS.items():
                queue = f"ttft-{name}-{config}-{uuid.uuid4().hex[:6]}"
                cmd = [python, "-m", "bench.ttft_peers", "worker", name, queue, str(batch_ms)]
                log = tmp / f"peer-{name}-{config}.log"
                self.workers.append(WorkerProcess(cmd, env, log, READY))
                self.queues[name, config] = queue
        self._cmd = [python, "-m", "bench.ttft_peers", "client", address]
        self._env, self._log = env, tmp / "peers-client.log"
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


def peer(name: str) -> ModuleType:
    return importlib.import_module(MODULES[name])


async def connect(name: str, address: str, batch_ms: float, worker: bool) -> Any:
    module = peer(name)
    if name == "openai-agents":
        return await module.connect(address, batch_ms, model=worker)
    return await module.connect(address)


async def serve(name: str, task_queue: str, batch_ms: float) -> None:
    os.environ["TTFT_PEER_BATCH_MS"] = str(batch_ms)  # read by bench.ttft_peer_pydantic
    client = await connect(name, os.environ["TEMPORAL_ADDRESS"], batch_ms, worker=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with peer(name).worker(client, task_queue):
        print(READY, flush=True)
        await stop.wait()


async def drive(address: str) -> None:
    """Answer the driver's turn requests, one a line, until stdin closes."""
    clients = {name: await connect(name, address, 100, worker=False) for name in MODULES}
    loop = asyncio.get_running_loop()
    print("ttft peers client ready", flush=True)
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        request = json.loads(line)
        name = request["peer"]
        prior = PRIOR if request["kind"] == "warm" else []
        workflow_id = f"ttft-{name}-{request['kind']}-{uuid.uuid4().hex[:10]}"
        try:
            took = await peer(name).turn(
                clients[name], request["queue"], workflow_id, prior, request["cooldown_ms"]
            )
            print(f"TOOK {took!r}", flush=True)
        except Exception as exc:  # the driver notes it on the peer's row
            print(f"ERROR {type(exc).__name__}: {exc}".replace("\n", " ")[:500], flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        asyncio.run(serve(sys.argv[2], sys.argv[3], float(sys.argv[4])))
    else:
        asyncio.run(drive(sys.argv[2]))
    sys.stdout.flush()
    os._exit(0)  # temporalio on 3.11 can crash at interpreter exit
