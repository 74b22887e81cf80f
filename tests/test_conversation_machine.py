"""The conversation's decisions without a server: ``workflows.conversation_machine``.

A hypothesis ``RuleBasedStateMachine`` drives the machine as the workflow's shell does, with
any sequence of requests (every message concurrency, malformed ones, idempotent retries,
updates), turn results (completed, error, aborted, skipped, continued for client tools),
child turns that fail to start, cancels, tool results, time passing (debounce), worker
deaths (the run replayed from its events on a fresh machine) and continue-as-new (the
carried state round-tripped through JSON into a new run). After every step: no accepted
request is lost or answered twice, turns run in the order their requests came, at most one
turn runs, and every bound holds. Unit tests below pin each message concurrency.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from pydantic_core import to_json

from durable_turns.contract import (
    CONVERSATION_BUSY,
    INVALID_REQUEST,
    MAX_CARRIED_BYTES,
    MAX_QUEUED_BYTES,
    MAX_QUEUED_REQUESTS,
    MAX_STORED_REQUEST_BYTES,
    QUEUE_FULL,
    REQUEST_EXPIRED,
    TURN_START_FAILED,
    ConversationInput,
    ConversationOpened,
    PendingRequest,
    TurnResult,
)
from durable_turns.workflows import conversation_machine as cm
from durable_turns.workflows.conversation_machine import (
    MAX_PENDING_TOOL_RESULT_BYTES,
    RECENT,
    RECENT_REJECTED,
    TURN_START_ATTEMPTS,
    CancelTurn,
    Conversation,
    ForwardToolResults,
    Note,
    Rejected,
    TurnStart,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MODES = [None, "queue", "merge", "latest", "drop", "debounce"]


def submit(text: str = "hi", request_id: str | None = None, **extra: Any) -> dict[str, Any]:
    value: dict[str, Any] = {"messages": [{"role": "user", "content": text}], **extra}
    if request_id is not None:
        value["request_id"] = request_id
    return value


def result_of(start: TurnStart, status: str = "completed", **extra: Any) -> TurnResult:
    return TurnResult(
        request_id=start.request.request_id,
        conversation_id=start.input.conversation_id,
        turn_number=start.number,
        workflow_id=start.workflow_id,
        status=status,  # type: ignore[arg-type]
        **extra,
    )


# --- the shell, emulated ------------------------------------------------------------------


@dataclass
class Driver:
    """What ``workflows.conversation`` does with the machine, minus Temporal: every action
    is logged, so a worker death replays the run's actions on a fresh machine."""

    start_state: str
    """The run's input, as JSON (continue-as-new's carry, or none)."""
    first_id: int
    now: datetime = T0
    log: list[tuple[Any, ...]] = field(default_factory=list)
    turn: TurnStart | None = None
    cancelled: bool = False
    machine: Conversation = field(init=False)
    ids: itertools.count[int] = field(init=False)

    def __post_init__(self) -> None:
        self.ids = itertools.count(self.first_id)
        state = ConversationInput.model_validate_json(self.start_state)
        self.machine = Conversation("conv-h", state, lambda: f"gen-{next(self.ids)}")
        if state.turn_count is None:
            worker = ConversationOpened(turn_count=0, message_concurrency=state.worker_concurrency)
            self.machine.opened(worker)  # what the worker's defaults say

    def apply(self, action: tuple[Any, ...]) -> Any:
        self.log.append(action)
        m, kind, args = self.machine, action[0], action[1:]
        if kind == "signal":
            decisions = m.signal(*args, self.now)
            self._obey(decisions)
            return decisions
        if kind == "admit":
            try:
                request_id, decisions = m.admit(*args, self.now)
            except Rejected as e:
                return e
            self._obey(decisions)
            return request_id
        if kind == "wait":
            self.now += timedelta(milliseconds=args[0])
            return None
        if kind == "next":  # the loop takes the head (after its debounce timers)
            head = m.state.queue[0]
            if m.debounces(head):
                ms = m.debounce_ms(head)
                while (left := m.quiet_left(ms, self.now)) is not None:
                    self.now += timedelta(milliseconds=left)  # the timer fires
            request = m.take_next()
            if request.kind == cm.ADD:
                m.add_begins(request)
                m.running = None
                m.add_done(request)
                return request
            start = m.turn_begins(request)
            for attempt in range(args[0]):  # the child's start fails
                failed = m.turn_start_failed(start, attempt, "id taken")
                if failed is not None:
                    m.turn_ended()
                    m.turn_done(request, failed)
                    return request
            if args[0] < TURN_START_ATTEMPTS:
                m.turn_started(start)
                self.turn, self.cancelled = start, False
            return request
        if kind == "finish":  # the running turn's result (or its child's failure)
            status, auto_continue, failed = args
            start = self.turn
            assert start is not None
            self.turn = None
            if failed:
                result = m.turn_failed(start, "TimeoutError", "the turn timed out")
            else:
                status = "aborted" if self.cancelled else status
                result = result_of(start, status, auto_continue=auto_continue)
            m.turn_ended()
            return m.turn_done(start.request, result)
        if kind == "forward":
            return m.take_tool_result()
        raise AssertionError(kind)

    def _obey(self, decisions: list[cm.Decision]) -> None:
        for decision in decisions:
            if isinstance(decision, CancelTurn):
                assert self.turn is not None, "a cancel with no turn to cancel"
                self.cancelled = True


def replayed(driver: Driver) -> Driver:
    """The same run on a fresh machine: what a worker that replays the history rebuilds."""
    fresh = Driver(driver.start_state, driver.first_id)
    for action in driver.log:
        fresh.apply(action)
    return fresh


# --- the stateful test ---------------------------------------------------------------------

TEXTS = st.sampled_from(["hi", "hi", "x" * 2_000, "y" * 60_000, "z" * 200_000])
REQUEST_IDS = st.sampled_from([None, None, "r1", "r2", "r3", "r4", "r5", "r6"])
MALFORMED = st.sampled_from([{"bad": True}, 5, "text", {"messages": []}, None, [1]])


class ConversationRules(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.driver = Driver(ConversationInput().model_dump_json(), 0)
        self.accepted: list[str] = []
        """Request ids a client's request got accepted under, in order."""
        self.generated: set[str] = set()
        """Requests the machine queued itself (a continuation after client tools)."""
        self.answered: dict[str, int] = {}
        self.ran: list[str] = []
        """Request ids in the order their turn (or add) took them from the queue."""
        self.rejections = 0

    @initialize(mode=st.sampled_from(MODES), worker=st.sampled_from(MODES))
    def settings_(self, mode: str | None, worker: str | None) -> None:
        """The conversation's own message concurrency and the worker's default."""
        state = ConversationInput(message_concurrency=mode, worker_concurrency=worker)
        self.driver = Driver(state.model_dump_json(), 0)

    @property
    def m(self) -> Conversation:
        return self.driver.machine

    def _live(self) -> set[str]:
        live = {p.request_id for p in self.m.state.queue}
        if self.driver.turn is not None:
            request = self.driver.turn.request
            live |= {request.request_id, *request.merged}
        return live

    def _accept(self, before: set[str]) -> None:
        for p in self.m.state.queue:
            if p.request_id not in before and p.request_id not in self.generated:
                assert p.request_id not in self.accepted, "an id accepted twice"
                self.accepted.append(p.request_id)

    def _answered(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            self.answered[request_id] = self.answered.get(request_id, 0) + 1

    def _count(self, decisions: Any) -> None:
        if isinstance(decisions, list):
            self.rejections += sum(isinstance(d, Note) for d in decisions)

    # requests

    @rule(text=TEXTS, request_id=REQUEST_IDS, mode=st.sampled_from(MODES), update=st.booleans())
    def submit(self, text: str, request_id: str | None, mode: str | None, update: bool) -> None:
        value = submit(text, request_id, **({"message_concurrency": mode} if mode else {}))
        if mode == "debounce":
            value["debounce_ms"] = 200
        before = self._live() | set(self.answered)
        s = self.m.state
        mode_ = mode or s.message_concurrency or s.worker_concurrency or "queue"
        busy = self.driver.turn is not None or any(p.kind != "add" for p in s.queue)
        known = request_id is not None and request_id in self.m.records
        size = len(to_json(value))
        action = ("admit", value, size) if update else ("signal", cm.SUBMIT, value, size)
        answer = self.driver.apply(action)
        if isinstance(answer, Rejected):
            assert answer.type in (CONVERSATION_BUSY, QUEUE_FULL, cm.REQUEST_TOO_LARGE)
        self._count(answer)
        self._accept(before)
        if mode_ == "drop" and busy and not known:  # refused, whichever way it came
            refused = answer.type if isinstance(answer, Rejected) else None
            if isinstance(answer, list):
                refused = CONVERSATION_BUSY if CONVERSATION_BUSY in answer[0].details else None
            assert refused == CONVERSATION_BUSY, answer
        if mode_ == "latest" and self.driver.turn is not None and not known:
            accepted = not isinstance(answer, Rejected) and not (
                isinstance(answer, list) and answer and isinstance(answer[0], Note)
            )
            assert self.driver.cancelled or not accepted, "latest did not cancel the turn"

    @rule(modes=st.lists(st.sampled_from(MODES), min_size=2, max_size=5), turn=st.booleans())
    def burst(self, modes: list[str | None], turn: bool) -> None:
        """Messages arriving together (behind a turn that starts first, if ``turn``)."""
        if turn and self.driver.turn is None and self.m.state.queue:
            self.next_turn(0)
        for mode in modes:
            self.submit("hi", None, mode, False)

    @rule(request_id=REQUEST_IDS, last=st.booleans())
    def regenerate(self, request_id: str | None, last: bool) -> None:
        value: dict[str, Any] = {"regenerate": "last" if last else "conv-h/turn-1/assistant"}
        if request_id:
            value["request_id"] = request_id
        before = self._live() | set(self.answered)
        self._count(self.driver.apply(("signal", cm.SUBMIT, value, 80)))
        self._accept(before)

    @rule(request_id=REQUEST_IDS)
    def continue_last_turn(self, request_id: str | None) -> None:
        before = self._live() | set(self.answered)
        value = {"request_id": request_id} if request_id else None
        self._count(self.driver.apply(("signal", cm.CONTINUE, value, 20)))
        self._accept(before)

    @rule(text=TEXTS, request_id=REQUEST_IDS)
    def add_messages(self, text: str, request_id: str | None) -> None:
        before = self._live() | set(self.answered)
        value = submit(text, request_id)
        self._count(self.driver.apply(("signal", cm.ADD, value, len(to_json(value)))))
        self._accept(before)

    @rule(value=MALFORMED, kind=st.sampled_from([cm.SUBMIT, cm.CONTINUE, cm.ADD, cm.CANCEL]))
    def malformed(self, value: Any, kind: str) -> None:
        before = self.m.state.rejected_count
        known = self._live() | set(self.answered)
        decisions = self.driver.apply(("signal", kind, value, 10))
        self._count(decisions)
        if value is None and kind in (cm.CONTINUE, cm.CANCEL):
            self._accept(known)  # no argument: a continuation, or a cancel of the turn
            return
        assert self.m.state.rejected_count == before + 1

    @rule(target_id=REQUEST_IDS)
    def cancel(self, target_id: str | None) -> None:
        queued = {p.request_id for p in self.m.state.queue}
        value = {"request_id": target_id} if target_id else {}
        decisions = self.driver.apply(("signal", cm.CANCEL, value, 20))
        if target_id in queued:  # it never runs: answered aborted
            assert target_id not in {p.request_id for p in self.m.state.queue}
            assert self.m.results[target_id].status == "aborted"
            self._answered([target_id])
        elif self.driver.turn is not None and target_id in (
            None,
            self.driver.turn.request.request_id,
        ):
            assert decisions == [CancelTurn()]
        else:
            assert decisions == []

    @rule(size=st.sampled_from([10, 100_000, 300_000]))
    def tool_result(self, size: int) -> None:
        value = {"tool_call_id": "c", "output": "o" * size}
        decisions = self.driver.apply(("signal", cm.TOOL_RESULT, value, size))
        if self.driver.turn is None or size > cm.MAX_TOOL_RESULT_BYTES:
            assert isinstance(decisions[0], Note)
        self._count(decisions)
        assert all(isinstance(d, Note | ForwardToolResults) for d in decisions)

    @rule()
    def forward_one(self) -> None:
        self.driver.apply(("forward",))

    @rule(ms=st.sampled_from([1, 50, 199, 200, 1000]))
    def time_passes(self, ms: int) -> None:
        self.driver.apply(("wait", ms))

    # turns

    @precondition(lambda self: self.driver.turn is None and bool(self.m.state.queue))
    @rule(start_failures=st.sampled_from([0, 0, 0, 1, TURN_START_ATTEMPTS]))
    def next_turn(self, start_failures: int) -> None:
        request = self.driver.apply(("next", start_failures))
        assert self.m.state.turn_count is not None
        event(f"took a {request.kind} request" + (" with merges" if request.merged else ""))
        kinds = {self.m.records[r].kind for r in request.merged if r in self.m.records}
        assert kinds <= {"submit"}, f"merged {kinds} into a turn"
        self.ran.extend([request.request_id, *request.merged])
        if request.kind == cm.ADD or self.driver.turn is None:  # done at once
            self._answered([request.request_id, *request.merged])

    @precondition(lambda self: self.driver.turn is not None)
    @rule(
        status=st.sampled_from(["completed", "error", "aborted", "skipped"]),
        auto_continue=st.booleans(),
        failed=st.booleans(),
    )
    def turn_ends(self, status: str, auto_continue: bool, failed: bool) -> None:
        assert self.driver.turn is not None
        request = self.driver.turn.request
        before = {p.request_id for p in self.m.state.queue}
        cancelled = self.driver.cancelled
        continues = auto_continue and status == "completed" and not (failed or cancelled)
        done = self.driver.apply(("finish", status, continues, failed))
        self._answered([request.request_id, *request.merged])
        for p in self.m.state.queue:
            if p.request_id not in before:  # the continuation of a turn whose tools answered
                assert p.kind == "continue" and self.m.state.queue[0] is p
                self.generated.add(p.request_id)
        assert done.respond == (failed or cancelled or status != "skipped")

    # the run

    @rule()
    def worker_dies(self) -> None:
        """Another worker replays the run: the same actions rebuild the same machine."""
        fresh = replayed(self.driver)
        assert fresh.machine.state == self.m.state
        assert fresh.machine.view() == self.m.view()
        assert fresh.turn == self.driver.turn
        self.driver = fresh

    @precondition(lambda self: self.driver.turn is None)
    @rule()
    def continue_as_new(self) -> None:
        self.m.hand_over()
        carry = self.m.carry()
        encoded = to_json(carry)
        assert len(encoded) <= MAX_CARRIED_BYTES
        queue = [p.request_id for p in self.m.state.queue]
        ids = next(self.driver.ids)
        self.driver = Driver(encoded.decode(), ids + 1000, now=self.driver.now)
        assert [p.request_id for p in self.m.state.queue] == queue, "the queue is carried"

    # invariants

    @invariant()
    def no_request_lost_or_answered_twice(self) -> None:
        live = self._live()
        for request_id in self.accepted:
            count = self.answered.get(request_id, 0)
            assert count <= 1, f"{request_id} answered {count} times"
            assert (request_id in live) != (count == 1), f"{request_id} lost or live when done"
        queued = [p.request_id for p in self.m.state.queue]
        assert len(queued) == len(set(queued)), "a request queued twice"

    @invariant()
    def order_kept(self) -> None:
        position = {r: i for i, r in enumerate(self.accepted)}
        ran = [position[r] for r in self.ran if r in position]
        cancelled_ok = ran == sorted(ran)
        assert cancelled_ok, f"turns ran out of order: {self.ran} for {self.accepted}"
        queued = [position[p.request_id] for p in self.m.state.queue if p.request_id in position]
        assert queued == sorted(queued)

    @invariant()
    def at_most_one_turn(self) -> None:
        m = self.m
        if self.driver.turn is None:
            assert not m.turn_running and m.running is None
        else:
            assert m.turn_running and m.running is self.driver.turn.request
            assert m.records[m.running.request_id].status == "running"
            assert m.running.request_id not in {p.request_id for p in m.state.queue}

    @invariant()
    def bounds_held(self) -> None:
        m, s = self.m, self.m.state
        assert m.queued_bytes == sum(p.size for p in s.queue)
        assert len(s.queue) <= MAX_QUEUED_REQUESTS and m.queued_bytes <= MAX_QUEUED_BYTES
        assert all(p.size <= MAX_STORED_REQUEST_BYTES for p in s.queue)
        if self.driver.turn is not None:
            assert self.driver.turn.request.size <= MAX_STORED_REQUEST_BYTES
        assert len(s.recent) <= RECENT and len(s.results) <= RECENT
        assert len(m.results) == len(s.results)
        assert len(s.rejected) <= min(RECENT_REJECTED, s.rejected_count)
        assert 0 <= m.tool_result_bytes <= MAX_PENDING_TOOL_RESULT_BYTES
        assert s.rejected_count == self.rejections

    @invariant()
    def state_answers(self) -> None:
        view = self.m.view()
        assert view.queued_count == len(self.m.state.queue)
        assert [r.request_id for r in view.queue] == [p.request_id for p in self.m.state.queue]


ConversationRules.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestConversationRules = ConversationRules.TestCase


# --- each message concurrency, and the rest of what the machine decides --------------------


def fresh(**settings_: Any) -> Conversation:
    ids = itertools.count(1)
    m = Conversation("conv-u", ConversationInput(**settings_), lambda: f"gen-{next(ids)}")
    m.opened(ConversationOpened(turn_count=0))
    return m


def running(m: Conversation, text: str = "first") -> TurnStart:
    assert m.signal(cm.SUBMIT, submit(text, "first"), 10, T0) == []
    start = m.turn_begins(m.take_next())
    m.turn_started(start)
    return start


def finish(m: Conversation, start: TurnStart, status: str = "completed") -> cm.TurnDone:
    m.turn_ended()
    return m.turn_done(start.request, result_of(start, status))


def test_queue_runs_each_request_in_its_own_turn_in_order() -> None:
    m = fresh()
    start = running(m)
    for rid in ("a", "b"):
        assert m.signal(cm.SUBMIT, submit(rid, rid), 10, T0) == []
    finish(m, start)
    assert [m.take_next().request_id for _ in range(2)] == ["a", "b"]


def test_merge_answers_the_waiting_messages_in_one_turn() -> None:
    m = fresh(message_concurrency="merge")
    start = running(m)
    m.signal(cm.SUBMIT, submit("one", "a"), 10, T0)
    m.signal(cm.SUBMIT, submit("two", "b", model="demo:echo"), 10, T0)
    finish(m, start)
    merged = m.take_next()
    assert merged.request_id == "a" and merged.merged == ["b"] and not m.state.queue
    assert [x.text for x in merged.messages] == ["one", "two"] and merged.model == "demo:echo"
    assert m.records["b"].merged_into == "a" and m.records["b"].status == "running"
    second = m.turn_begins(merged)
    m.turn_started(second)
    finish(m, second)
    assert m.results["b"].request_id == "b" and m.results["b"].turn_number == second.number


def test_latest_cancels_the_running_turn() -> None:
    m = fresh()
    running(m)
    assert m.signal(cm.SUBMIT, submit("now", "n", message_concurrency="latest"), 10, T0) == [
        CancelTurn()
    ]


def test_drop_is_refused_while_busy_and_taken_when_idle() -> None:
    m = fresh(message_concurrency="drop")
    start = running(m)
    [note] = m.signal(cm.SUBMIT, submit("late", "late"), 10, T0)
    assert isinstance(note, Note) and CONVERSATION_BUSY in note.details
    assert m.state.rejected[-1].error.type == CONVERSATION_BUSY  # type: ignore[union-attr]
    with pytest.raises(Rejected) as refused:
        m.admit(submit("late", "late2"), 10, T0)
    assert refused.value.type == CONVERSATION_BUSY
    finish(m, start)
    assert m.signal(cm.SUBMIT, submit("now", "now"), 10, T0) == []


def test_debounce_waits_for_quiet_and_a_new_message_restarts_the_wait() -> None:
    m = fresh(message_concurrency="debounce", debounce_ms=500)
    m.signal(cm.SUBMIT, submit("one", "a"), 10, T0)
    head = m.state.queue[0]
    assert m.debounces(head) and m.debounce_ms(head) == 500
    assert m.quiet_left(500, T0 + timedelta(milliseconds=200)) == 300
    m.signal(cm.SUBMIT, submit("two", "b"), 10, T0 + timedelta(milliseconds=400))
    assert m.quiet_left(500, T0 + timedelta(milliseconds=600)) == 300
    assert m.quiet_left(500, T0 + timedelta(milliseconds=900)) is None
    assert m.take_next().merged == ["b"]


def test_cancel_a_queued_request_or_the_running_turn() -> None:
    m = fresh()
    start = running(m)
    m.signal(cm.SUBMIT, submit("q", "q"), 10, T0)
    assert m.signal(cm.CANCEL, {"request_id": "q"}, 10, T0) == []
    assert m.results["q"].status == "aborted" and not m.state.queue
    assert m.signal(cm.CANCEL, {}, 10, T0) == [CancelTurn()]
    assert m.signal(cm.CANCEL, {"request_id": start.request.request_id}, 10, T0) == [CancelTurn()]
    assert m.signal(cm.CANCEL, {"request_id": "other"}, 10, T0) == []


def test_tool_results_need_a_turn_and_are_bounded() -> None:
    m = fresh()
    [note] = m.tool_result({"tool_call_id": "c"})
    assert isinstance(note, Note) and INVALID_REQUEST in note.details
    running(m)
    big = {"tool_call_id": "c", "output": "o" * 200_000}
    while m.tool_result_bytes + len(to_json(big)) <= MAX_PENDING_TOOL_RESULT_BYTES:
        assert m.tool_result(big) == [ForwardToolResults()]
    [full] = m.tool_result(big)
    assert isinstance(full, Note) and QUEUE_FULL in full.details
    assert m.take_tool_result() == (big,)


def test_a_turn_that_cannot_start_ends_with_a_typed_error() -> None:
    m = fresh()
    m.signal(cm.SUBMIT, submit("x", "x"), 10, T0)
    start = m.turn_begins(m.take_next())
    ids = [start.workflow_id]
    for attempt in range(TURN_START_ATTEMPTS - 1):
        assert m.turn_start_failed(start, attempt, "taken") is None
        ids.append(start.workflow_id)
    failed = m.turn_start_failed(start, TURN_START_ATTEMPTS - 1, "taken")
    assert failed is not None and failed.error is not None
    assert failed.error.type == TURN_START_FAILED
    assert ids[0] == "conv-u/turn-1" and all(i.startswith("conv-u/turn-1~") for i in ids[1:])


def test_client_tools_answered_continue_before_anything_else() -> None:
    m = fresh()
    start = running(m)
    m.signal(cm.SUBMIT, submit("next", "next"), 10, T0)
    m.turn_ended()
    m.turn_done(start.request, result_of(start, auto_continue=True))
    assert [p.kind for p in m.state.queue] == ["continue", "submit"]


def test_a_queue_full_of_bytes_refuses_with_queue_full() -> None:
    m = fresh()
    big = "b" * 200_000
    taken = [m.signal(cm.SUBMIT, submit(big, f"r{i}"), 200_100, T0) for i in range(3)]
    assert taken[:2] == [[], []] and isinstance(taken[2][0], Note)
    assert m.state.rejected[-1].error.type == QUEUE_FULL  # type: ignore[union-attr]
    assert m.view().waiting_for is None and m.queued_bytes <= MAX_QUEUED_BYTES


def test_a_result_no_longer_held_is_expired() -> None:
    m = fresh()
    start = running(m)
    finish(m, start)
    carry = m.carry()
    carry.results = []
    again = Conversation("conv-u", carry, lambda: "x")
    assert again.expired("first") is not None
    assert again.expired("first").type == REQUEST_EXPIRED  # type: ignore[union-attr]


def test_continue_as_new_carries_the_state_it_keeps() -> None:
    m = fresh(message_concurrency="merge", model="demo:echo")
    start = running(m)
    m.signal(cm.SUBMIT, submit("a", "a"), 10, T0)
    m.signal(cm.ADD, submit("note"), 10, T0)
    m.signal(cm.SUBMIT, {"bad": 1}, 10, T0)
    finish(m, start)
    carry = ConversationInput.model_validate_json(to_json(m.carry()))
    again = Conversation("conv-u", carry, lambda: "x")
    assert again.view() == m.view()
    assert again.state is carry  # the machine's state is the carried object itself


def test_the_machine_imports_nothing_of_the_sdk() -> None:
    """No import of ``temporalio`` in the module, and importing it loads no temporalio
    module beyond what the wire contract's search attribute keys load."""
    path = Path(cm.__file__)
    tree = ast.parse(path.read_text())
    names = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ] + [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [n for n in names if n.split(".")[0] == "temporalio"], names
    probe = (
        "import sys\n"
        "import durable_turns.contract\n"
        "before = {m for m in sys.modules if m.startswith('temporalio')}\n"
        "import durable_turns.workflows.conversation_machine\n"
        "print(sorted(m for m in sys.modules if m.startswith('temporalio') and m not in before))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_pending_requests_stay_plain_data() -> None:
    """What a decision hands the shell is the contract's data (encodes as the SDK will)."""
    m = fresh()
    start = running(m)
    assert isinstance(start.request, PendingRequest)
    assert start.input.new_messages[0].id == "first/0"
    to_json(start.input)
