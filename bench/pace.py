"""A real model's pace: a 3-step turn end to end, and its inter-token gaps at the client.

    python -m bench.pace [--rounds N] [--tuned-batch-ms 10] [--tuned-poll-ms 0]

The local server (``testkit/llm_server.py``) replays recorded wire formats at a realistic pace:
``--first-token-s`` (0.4 s) before the first delta of each response, then ``--tokens-per-s``
(60) deltas a second. Each turn is 3 model steps: a ``get_weather`` tool call, another, then
a text answer. One turn of each system per round, the order rotating round by round:

* **direct SDK loop** (Anthropic): ``AsyncAnthropic.messages.stream`` three times, the tool
  called in-process between the steps (the floor; ``bench.pace_sdk``);
* **direct SDK loop** (OpenAI): the same loop with ``AsyncOpenAI.responses.create(stream=True)``
  in OpenAI's Responses format, the floor of the peer that speaks it;
* **durable-turns**: ``TurnsClient.start`` on a warm conversation, then ``chunks`` to the
  end of the turn, on an engine worker process (SQLite store and chunk stream);
* **the pace floor** (``bench.pace_floor``): bare Temporal in the wire contract's shape
  (an update on a warm conversation workflow runs the turn as a child workflow), whose
  activities make the direct SDK call per step and the tool call between steps, the deltas
  relayed to the client over a direct TCP connection: what the contract's hop costs at pace;
* **OpenAI Agents SDK + Temporal plugin** and **pydantic-ai + Temporal**
  (``bench.stream_peers``: the workflows of ``bench.stream_peer_openai_agents`` and
  ``bench.stream_peer_pydantic_ai``, shared with ``bench.ttft``, on workers whose agents have
  the tool; in the peers' venv, a worker process each): real model classes
  (``OpenAIResponsesModel``, ``AnthropicModel``) at the mock, ``get_weather`` as each one's
  tool, streaming through ``temporalio.contrib.workflow_streams`` (openai-agents:
  ``Runner.run_streamed`` with the plugin's ``streaming_topic``; pydantic-ai:
  ``TemporalDurability(event_stream_topic=…)``), subscribed from here with
  ``WorkflowStreamClient``. Each peer runs twice, on a worker process per tuning: with the
  integrations' defaults (the activity publishes every 100 ms, the client polls with
  ``workflow_streams``' 100 ms cooldown), and tuned for streaming (``--tuned-batch-ms`` 10,
  ``--tuned-poll-ms`` 0). Without the peers' venv their rows say why they were not measured.

End to end is from the client's call to the turn's last event (durable-turns: the end of
its chunks; the floor: the update's answer; openai-agents: the third response's
``response.completed`` on the stream; pydantic-ai: its terminal result event); the gaps are
between consecutive model deltas (text and tool input) as the client receives them, p50 and
p99 over all turns. Figures are medians; compare ratios of the same run. Writes
``bench/results/pace.md``/``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import os
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import floor
from bench.common import (
    ROOT,
    Row,
    WorkerProcess,
    judged,
    loadavg,
    median,
    ms,
    ready_worker,
    render_text,
    run_meta,
    start_engine_worker,
    start_worker,
    temporal_server,
    write_results,
)
from bench.pace_sdk import ANTHROPIC_MODEL, OPENAI_DELTAS, anthropic_loop, openai_loop
from bench.peers import VENV, ensure_venv
from bench.stream_peers import TOPIC, WORKFLOWS, peer_worker
from testkit.llm_server import FIXTURES, LLMServer, Reply

TOOL_STEP, TEXT_STEP = "anthropic/tool_use.sse", "anthropic/text_basic.sse"
OPENAI_TOOL_STEP, OPENAI_TEXT_STEP = (
    "openai/responses_function_call.sse",
    "openai/responses_text.sse",
)
OPENAI_CALL = {  # the recorded call is final_result({"result": 6666}): make it get_weather's
    '"name":"final_result"': '"name":"get_weather"',
    '{\\"result\\":6666}': '{\\"location\\":\\"Oslo\\"}',
    '"delta":"result"': '"delta":"location"',
    '"delta":"666"': '"delta":"\\"Osl"',
    '"delta":"6"': '"delta":"o\\""',
}
TARGET_RATIO = 1.02
DELTAS = ("text-delta", "tool-input-delta")
PEERS = {
    "openai-agents": ("OpenAI Agents SDK + Temporal plugin", "openai"),
    "pydantic-ai": ("pydantic-ai + Temporal", "anthropic"),
}
DRAINED = "__pydantic_ai_agent_events_drained"
"""pydantic-ai's ``stream_agent_events`` acknowledges the terminal event with this signal
(the workflow waits for it before it ends); this client does what it does."""

Marks = list[float]
"""Seconds from the client's call: every delta as it reached the client, then the end."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def openai_replies(paced: Callable[..., Reply]) -> list[Reply]:
    call = (FIXTURES / OPENAI_TOOL_STEP).read_text()
    for old, new in OPENAI_CALL.items():
        call = call.replace(old, new)
    calls = [call.replace("call_CWXgs68YprAjp6t0371hiPOI", f"call_{i}") for i in (1, 2)]
    return [*(paced(body=c) for c in calls), paced(OPENAI_TEXT_STEP)]


class Clock:
    """The marks of the turn being timed (turns run one at a time)."""

    def __init__(self) -> None:
        self.began, self.marks = time.perf_counter(), []

    def start(self) -> Clock:
        self.began, self.marks = time.perf_counter(), []
        return self

    def mark(self, count: int = 1) -> None:
        self.marks.extend([time.perf_counter() - self.began] * count)

    def end(self) -> Marks:
        return [*self.marks, time.perf_counter() - self.began]


@dataclass(frozen=True)
class Tuning:
    """How a peer's deltas travel: its activity's publish interval, the client's poll cooldown."""

    name: str
    batch_ms: float
    poll_ms: float

    def text(self) -> str:
        return f"{self.batch_ms:g} ms batches, {self.poll_ms:g} ms poll cooldown"


DEFAULTS = Tuning("defaults", 100, 100)
"""Both integrations' publish interval and ``workflow_streams``' poll cooldown."""


@dataclass
class System:
    name: str
    label: str
    wire: str
    """Whose recorded replies the mock plays: "anthropic" or "openai"."""
    turn: Callable[[], Awaitable[Marks]] | None = None
    error: str = ""
    peer: str = ""
    tuning: Tuning | None = None
    samples: list[Marks] = field(default_factory=list)

    def figures(self) -> tuple[float, float, float] | None:
        if not self.samples:
            return None
        ends = [m[-1] for m in self.samples]
        gaps = [b - a for m in self.samples for a, b in itertools.pairwise(m[:-1])]
        return median(ends), percentile(gaps, 0.5), percentile(gaps, 0.99)


def is_delta(peer: str, event: dict[str, Any]) -> bool:
    """A model delta on a peer's stream: a Responses ``….delta`` (openai-agents publishes the
    raw events), or pydantic-ai's part delta, or the part start that carries a part's first
    text or tool input (its first delta)."""
    if peer == "openai-agents":
        return event.get("type") in OPENAI_DELTAS
    kind, part = event.get("event_kind"), event.get("part") or {}
    return kind == "part_delta" or (
        kind == "part_start" and bool(part.get("content") or part.get("args"))
    )


async def peer_turn(
    client: Any, peer: str, queue: str, clock: Clock, poll: float, responses: int = 3
) -> Marks:
    """Start the peer's workflow, follow its stream to the turn's last event (openai-agents:
    its ``responses``-th response), untimed: the acknowledgement (pydantic-ai) and the run's
    result."""
    from datetime import timedelta

    from temporalio.contrib.workflow_streams import WorkflowStreamClient

    wid = f"pace-{peer}-{uuid.uuid4().hex[:10]}"
    clock.start()
    handle = await client.start_workflow(
        WORKFLOWS[peer], args=["weather?", []], id=wid, task_queue=queue
    )
    stream = WorkflowStreamClient.create(client, wid)
    completed, drain = 0, None
    items = stream.subscribe([TOPIC], poll_cooldown=timedelta(milliseconds=poll))
    async with contextlib.aclosing(items):
        async for item in items:
            event = item.data if isinstance(item.data, dict) else {}
            if is_delta(peer, event):
                clock.mark()
            completed += event.get("type") == "response.completed"
            if completed == responses or "drain_token" in event:
                drain = event.get("drain_token")
                break
    marks = clock.end()
    if drain is not None:
        await handle.signal(DRAINED, drain)
    await handle.result()
    if completed != responses and drain is None:
        raise RuntimeError(f"{peer}: the stream ended before the turn's last event")
    return marks


async def run(rounds: int, first_token_s: float, tokens_per_s: float, tuned: Tuning) -> Any:
    import anthropic
    import openai
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from durable_turns.client import TurnsClient
    from durable_turns.codec import data_converter_from_env

    tmp = Path(tempfile.mkdtemp(prefix="bench-pace-"))
    load_start = loadavg()
    llm = LLMServer().start()
    paced = functools.partial(Reply, first_token_s=first_token_s, tokens_per_s=tokens_per_s)
    replies = {
        "anthropic": lambda: [paced(TOOL_STEP), paced(TOOL_STEP), paced(TEXT_STEP)],
        "openai": lambda: openai_replies(paced),
    }
    clock = Clock()
    workers: list[WorkerProcess] = []

    async def relayed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(4096):
            clock.mark(len(data))
        writer.close()

    relay = await asyncio.start_server(relayed, "127.0.0.1", 0)
    relay_address = f"127.0.0.1:{relay.sockets[0].getsockname()[1]}"
    why_not = await ensure_venv()

    async with temporal_server(tmp) as (address, server):
        tag = uuid.uuid4().hex[:6]
        queue = f"pace-{tag}"
        workers.append(
            start_engine_worker(
                address,
                queue,
                tmp,
                ANTHROPIC_BASE_URL=llm.base_url,
                ANTHROPIC_API_KEY="bench-key",
                TURNS_MODEL=f"anthropic:{ANTHROPIC_MODEL}",
                TURNS_TOOLS="bench.pace_tools",
            )
        )
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TEMPORAL_ADDRESS": address,
            "ANTHROPIC_BASE_URL": llm.base_url,
            "OPENAI_BASE_URL": llm.openai_base_url,
        }
        floor_queue = f"pace-floor-{tag}"
        workers.append(
            start_worker(
                [sys.executable, "-m", "bench.pace_floor", floor_queue],
                env,
                tmp / "pace-floor.log",
                "pace floor worker ready",
            )
        )
        client = await Client.connect(address, data_converter=data_converter_from_env())
        bare = await Client.connect(address, data_converter=pydantic_data_converter)
        turns = TurnsClient(client, queue, stream_url=f"sqlite:///{tmp / 'data' / 'chunks.db'}")
        sdk = anthropic.AsyncAnthropic(base_url=llm.base_url, api_key="bench-key", max_retries=0)
        oai = openai.AsyncOpenAI(base_url=llm.openai_base_url, api_key="bench-key", max_retries=0)
        conversation, floor_conversation = f"pace-{tag}", f"pace-floor-{tag}"
        llm.default = Reply(TEXT_STEP)
        await turns.send(conversation, "hello")  # the conversation exists and is cached

        async def direct() -> Marks:
            clock.start()
            await anthropic_loop(sdk, clock.mark)
            return clock.end()

        async def direct_openai() -> Marks:
            clock.start()
            await openai_loop(oai, clock.mark)
            return clock.end()

        async def engine() -> Marks:
            clock.start()
            started = await turns.start(conversation, "weather?")
            assert started.turn_number is not None
            async for event in turns.chunks(conversation, started.turn_number):
                if event.type == "chunk" and event.data.get("type") in DELTAS:
                    clock.mark()
            marks = clock.end()
            result = await turns.result(conversation, started)
            if result.steps != 3:
                raise RuntimeError(f"the turn took {result.steps} steps, not 3: {result.status}")
            return marks

        async def contract_floor() -> Marks:
            clock.start()
            request = uuid.uuid4().hex
            steps = await floor.send_child(
                bare, floor_queue, floor_conversation, request, "PaceFloorTurn", relay_address
            )
            marks = sorted(clock.end())
            if steps != 3:
                raise RuntimeError(f"the floor's turn took {steps} steps, not 3")
            return marks

        def start_peer(system: System, peer_queue: str) -> Callable[[], Awaitable[Marks]]:
            """The peer's worker process (its publish interval); how to run one turn."""
            assert system.tuning is not None
            python, batch = str(VENV / "bin" / "python"), system.tuning.batch_ms
            log = tmp / f"{peer_queue}.log"
            workers.append(
                ready_worker(
                    peer_worker(python, system.peer, peer_queue, batch, log, env, tools=True)
                )
            )
            poll = system.tuning.poll_ms
            return lambda: peer_turn(bare, system.peer, peer_queue, clock, poll)

        systems = [
            System("direct", "direct SDK loop (Anthropic)", "anthropic", direct),
            System("engine", "durable-turns", "anthropic", engine),
            System("floor", "contract floor at pace", "anthropic", contract_floor),
            System("direct-openai", "direct SDK loop (OpenAI Responses)", "openai", direct_openai),
        ]
        for peer, (label, wire) in PEERS.items():
            for tuning in (DEFAULTS, tuned):
                name = peer if tuning is DEFAULTS else f"{peer}-{tuning.name}"
                system = System(name, f"{label}, {tuning.name}", wire, peer=peer, tuning=tuning)
                systems.append(system)
                if why_not:
                    system.error = f"the peers' venv is not available: {why_not}"
                    continue
                try:
                    system.turn = start_peer(system, f"pace-{name}-{tag}")
                except Exception as e:
                    system.error = f"its worker did not start: {e}"[-400:]

        warmup = 1
        try:
            for i in range(warmup + rounds):
                live = [s for s in systems if s.turn and not s.error]
                k = i % len(live)
                for system in live[k:] + live[:k]:
                    assert system.turn is not None
                    llm.reset()
                    llm.push(*replies[system.wire]())
                    try:
                        marks = await system.turn()
                    except Exception as e:
                        system.error = f"{type(e).__name__}: {e}"[:400]
                        continue
                    if i >= warmup:
                        system.samples.append(marks)
        finally:
            await sdk.close()
            await oai.close()
            await turns.aclose()
            for worker in workers:
                worker.stop()
            relay.close()
            llm.stop()

    by_name = {s.name: s for s in systems}
    rows = pace_rows(by_name, first_token_s, tokens_per_s)
    meta = run_meta(
        f"a model's pace ({pace_text(first_token_s, tokens_per_s)}), {rounds} rotating rounds"
        f" after {warmup} warm-up",
        " ".join(["python -m bench.pace", *sys.argv[1:]]),
        load_start,
        server,
    )
    raw = {
        "marks_s": {s.name: s.samples for s in systems},
        "errors": {s.name: s.error for s in systems if s.error},
        "peer_tunings": [asdict(DEFAULTS), asdict(tuned)],
    }
    return rows, raw, meta


def pace_text(first_token_s: float, tokens_per_s: float) -> str:
    return f"{first_token_s * 1000:.0f} ms to the first token, {tokens_per_s:g} tokens/s"


MEASURES = ("3-step turn end to end", "inter-token gap p50", "inter-token gap p99")


def versus(
    system: System, ref: System, target: float | None = None, notes: tuple[str, ...] = ()
) -> list[Row]:
    """``system``'s three figures against ``ref``'s (the same run): end to end, gap p50, p99."""
    mine, theirs = system.figures(), ref.figures()
    if mine is None:
        return [Row("pace", f"{system.label}: not measured", "—", note=system.error or "?")]
    rows = []
    for n, measure in enumerate(MEASURES):
        if theirs is None:
            rows.append(Row("pace", f"{system.label}: {measure}", ms(mine[n]), "the floor"))
            continue
        ratio = mine[n] / theirs[n]
        rows.append(
            Row(
                "pace",
                f"{system.label}: {measure}",
                ms(mine[n]),
                ref.label,
                ratio,
                f"≤ {target}×" if target else "",
                judged(ratio, target) if target else "",
                note=notes[n] if n < len(notes) else "",
            )
        )
    return rows


BATCHED = (
    "the peers' activities publish their deltas in batches (by default every 100 ms): the deltas"
    " of one batch reach the client together, so most of their gaps are about 0 and their p50"
    " says how many deltas share a batch, not how smoothly the text arrives; the wait between"
    " batches shows in their p99 and their end to end"
)


def ahead(systems: dict[str, System], direct: dict[str, System]) -> list[Row]:
    """durable-turns' ratio to its direct loop against each peer's to its own: met when
    durable-turns' is the smaller for both peers. End to end against each peer's better
    tuning; the gaps against its tuned one (its defaults batch the deltas: ``BATCHED``)."""
    rows = []
    engine = systems["engine"].figures()
    base = systems["direct"].figures()
    for n, measure in ((0, "end to end"), (1, "inter-token gap p50"), (2, "inter-token gap p99")):
        label = f"durable-turns ahead of both peers: {measure} (ratio to its own direct loop)"
        peers: dict[str, float] = {}
        missing = []
        for s in systems.values():
            if not s.peer or (n and s.tuning is DEFAULTS):
                continue
            mine, floor_ = s.figures(), direct[s.peer].figures()
            if mine is None or floor_ is None:
                missing.append(f"{s.label}: {s.error or 'not measured'}")
            else:
                peers[s.peer] = min(peers.get(s.peer, float("inf")), mine[n] / floor_[n])
        if engine is None or base is None or missing:
            rows.append(Row("pace", label, "—", status="not measured", note="; ".join(missing)))
            continue
        ours = engine[n] / base[n]
        rows.append(
            Row(
                "pace",
                label,
                f"{ours:.3f}×",
                ", ".join(f"{p} {r:.3f}×" for p, r in peers.items()),
                ours / min(peers.values()),
                "< each peer's",
                "met" if all(ours < r for r in peers.values()) else "MISSED",
                note=(
                    "each peer at the better of its two tunings"
                    if n == 0
                    else "each peer tuned for streaming; " + BATCHED
                    if n == 1
                    else ""
                ),
            )
        )
    return rows


def pace_rows(
    systems: dict[str, System],
    first_token_s: float,
    tokens_per_s: float,
) -> list[Row]:
    direct, engine, contract = systems["direct"], systems["engine"], systems["floor"]
    own_direct = {
        p: systems["direct" if wire == "anthropic" else "direct-openai"]
        for p, (_, wire) in PEERS.items()
    }
    peer_notes = {
        "openai-agents": "openai-agents 0.22.3 + temporalio-openai-agents 1.1.0:"
        " OpenAIResponsesModel (OpenAIProvider(use_responses=True) at the mock),"
        " Runner.run_streamed in the workflow, the plugin's streaming model activity publishing"
        " every raw event to a WorkflowStream (ModelActivityParameters.streaming_topic), the"
        " client subscribing with WorkflowStreamClient; get_weather an activity"
        " (activity_as_tool); a worker process of its own",
        "pydantic-ai": "pydantic-ai-slim 2.68.0: AnthropicModel (AnthropicProvider at the mock),"
        " TemporalDurability(event_stream_topic=…): the model-request activity publishes the"
        " live model events to the workflow's AgentEventStream; the client subscribes with"
        " WorkflowStreamClient and acknowledges the terminal event as stream_agent_events does;"
        " get_weather the agent's tool; a part start carrying text or tool input counts as a"
        " delta; a worker process of its own",
    }
    pace = pace_text(first_token_s, tokens_per_s)
    hop = ""
    if (e := engine.figures()) and (c := contract.figures()) and (d := direct.figures()):
        hop = (
            f"of durable-turns' {e[0] / d[0]:.3f}× the direct loop's end to end, the contract"
            f" floor takes {c[0] / d[0]:.3f}× (its hop: update, child workflow, activity"
            " scheduling per step and tool call); the rest is durable-turns' own"
        )
    rows = versus(direct, System("", "", ""))
    rows += versus(
        engine,
        direct,
        TARGET_RATIO,
        (f"the mock at {pace}; step 1 and 2 call get_weather, step 3 answers",),
    )
    rows += versus(
        contract,
        direct,
        notes=(
            "bare Temporal in the wire contract's shape (bench.pace_floor): an update on a warm"
            " conversation workflow runs the turn as a child workflow; per step an activity"
            " makes the direct SDK streaming call, a tool activity between steps; the deltas"
            " reach the client over a TCP connection from the model activity (one byte per"
            " delta, no broker, nothing through Temporal): the cheapest real route, so the"
            " floor adds the contract's hop and nothing else",
        ),
    )
    rows += versus(engine, contract, notes=(hop,))
    rows += versus(
        systems["direct-openai"],
        System("", "", ""),
        notes=(
            "the OpenAI peer's floor: AsyncOpenAI.responses.create(stream=True), the tool"
            " in-process. The mock paces per delta: this fixture has 6 + 6 + 12 deltas"
            " (Anthropic's: 7 + 7 + 3), so each peer is compared with the direct loop of its"
            " own wire format, and the peers with durable-turns by those ratios",
        ),
    )
    for system in systems.values():
        if system.peer and system.tuning is not None:
            tuning = f"{system.tuning.name}: {system.tuning.text()}"
            first = system.tuning is DEFAULTS
            note = f"{peer_notes[system.peer]}. {tuning}" if first else tuning
            rows += versus(system, own_direct[system.peer], notes=(note,))
    return rows + ahead(systems, own_direct)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--first-token-s", type=float, default=0.4)
    parser.add_argument("--tokens-per-s", type=float, default=60.0)
    parser.add_argument(
        "--tuned-batch-ms",
        type=float,
        default=10.0,
        help="the peers' tuned publish interval (their defaults: 100 ms, measured too)",
    )
    parser.add_argument(
        "--tuned-poll-ms",
        type=float,
        default=0.0,
        help="the peers' tuned subscriber poll cooldown (workflow_streams' default: 100 ms)",
    )
    parser.add_argument("--out", default="pace", help="results stem (bench/results/STEM.md)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    started = time.monotonic()
    rows, raw, meta = asyncio.run(
        run(
            args.rounds,
            args.first_token_s,
            args.tokens_per_s,
            Tuning("tuned", args.tuned_batch_ms, args.tuned_poll_ms),
        )
    )
    meta["seconds"] = round(time.monotonic() - started)
    print(render_text(rows))
    print(f"written: {write_results(meta, rows, raw, args.out)}")
    sys.stdout.flush()
    os._exit(0)  # temporalio on 3.11 can crash at interpreter exit


if __name__ == "__main__":
    main()
