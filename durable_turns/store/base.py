"""The transcript store interface: the source of truth for messages.

Temporal history holds decisions and small summaries; the store holds the transcript, each
turn's recorded config, every step's output and every tool result. Every write is keyed
(message id; turn id + run + step; tool call id) and idempotent, so a retried activity never
duplicates anything: ``add_*``/``save_*`` keep the first write, ``put_*`` replaces it.
"""

from __future__ import annotations

import abc
import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field
from temporalio.exceptions import ApplicationError

from durable_turns.contract import INVALID_REQUEST, ToolCallOutcome
from durable_turns.errors import StoreUnavailable as StoreUnavailable
from durable_turns.errors import TurnNotOwned as TurnNotOwned
from durable_turns.messages import Message, Part, SourcePart, Usage


class TurnRecord(BaseModel):
    turn_id: str
    conversation_id: str
    turn_number: int
    request_id: str
    status: str = "running"
    continuation: bool = False
    body: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    """The TurnConfig that before_turn returned, with the engine's resolved defaults."""
    run: int = 0
    """Re-runs of the turn after a context compaction."""
    error: dict[str, Any] | None = None
    owner: str = ""
    """The workflow run that runs this turn (its first execution run id): its steps, tool
    results and messages belong to that run; "" for a record written before owners existed."""
    by_conversation: bool = False
    """The owner was started by the turn's own conversation (not directly by a client)."""
    regenerates: str | None = None
    """A regenerating turn: the first message of the reply it superseded."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The request's metadata (``SubmitMessages.metadata``, bounded by
    ``MAX_METADATA_BYTES``): every hook context and the turn's result carry it."""
    running: str | None = None
    """The local activity of the turn (``begin:<run>``, ``finish``, ``fail``) whose attempt
    has started and not ended: the next attempt that finds it set knows its worker died."""
    crashes: dict[str, int] = Field(default_factory=dict)
    """Attempts of each local activity (``running``) that started and never ended."""


Claim = Literal["new", "keep", "take_over", "refuse"]


def claim_decision(current: TurnRecord | None, claimant: TurnRecord) -> Claim:
    """What ``claim_turn`` does when ``claimant`` begins a turn ``current`` holds.

    A turn's data belongs to the run that made it and is never reused by another run. The
    turn's own conversation takes over a turn some other run holds (its data is deleted); a
    directly started turn takes over only another directly started one, never a
    conversation's turn. A record from before owners existed is adopted by its conversation.
    """
    if current is None:
        return "new"
    if current.owner == claimant.owner or not claimant.owner:
        return "keep"  # its own retry or re-run; or a caller from before owners existed
    if not current.owner:
        return "keep" if claimant.by_conversation else "refuse"
    if claimant.by_conversation or not current.by_conversation:
        return "take_over"
    return "refuse"


def kept_record(current: TurnRecord, claimant: TurnRecord) -> TurnRecord:
    """The record a "keep" claim stores: the claimant's, with the stored owner if it has none."""
    if claimant.owner:
        return claimant
    return claimant.model_copy(
        update={"owner": current.owner, "by_conversation": current.by_conversation}
    )


def started(previous: TurnRecord | None, record: TurnRecord, key: str) -> TurnRecord:
    """``record`` marked as running ``key``, with ``previous``'s count of attempts that
    never ended (``crashes``): one more when ``previous`` was running ``key`` too."""
    crashes = dict(previous.crashes) if previous is not None else {}
    if previous is not None and previous.running == key:
        crashes[key] = crashes.get(key, 0) + 1
    return record.model_copy(update={"running": key, "crashes": crashes})


def claimed(current: TurnRecord, claimant: TurnRecord) -> TurnRecord:
    """The record a "keep" claim stores: :func:`kept_record`, carrying the stored count of
    attempts that never ended, one more if the claimant starts what never ended."""
    record = kept_record(current, claimant)
    if claimant.running is None:
        return record.model_copy(update={"crashes": dict(current.crashes)})
    return started(current, record, claimant.running)


def owns(record_owner: str | None, owner: str | None) -> bool:
    """Whether a write by ``owner`` may go into a turn whose record has ``record_owner``
    (None: no record). No ``owner``: a caller from before owners existed, not checked."""
    if not owner:
        return True
    return record_owner is not None and record_owner in (owner, "")


class ToolCallRepair(BaseModel):
    """What ``repair_tool_call`` did with one call of a step that did not validate, recorded
    with the step (so never asked again): the model's call as it came, and the outcome."""

    tool_name: str
    """The name the model called."""
    input: Any = None
    """The input the model emitted (the raw text when it was not JSON)."""
    problem: str
    """``"unknown_tool"``, ``"invalid_json"`` or ``"invalid_input"``."""
    error: str
    """The validation error of the model's call."""
    repaired: bool = False
    """The hook returned a call: the step's part is that call (validated again when it runs)."""
    hook_error: str | None = None
    """The hook raised: this text is the call's tool error."""


class StepRecord(BaseModel):
    step: int
    run: int = 0
    parts: list[Part] = Field(default_factory=list)
    finish_reason: str = "stop"
    raw_finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    provider_metadata: dict[str, Any] | None = None
    response: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    model: str = ""
    active_tools: list[str] | None = None
    """``before_step``'s tool restriction for this step: its calls may use only these."""
    experimental_context: Any = None
    """``before_step``'s context, in force from this step on; tools get it."""
    sources: list[SourcePart] = Field(default_factory=list)
    """The sources (citations) the model streamed in this step."""
    request: dict[str, Any] = Field(default_factory=dict)
    """What was asked of the model (``request_metadata``): model, settings, tool names,
    message count; never the messages themselves, nor header values."""
    repairs: dict[str, ToolCallRepair] = Field(default_factory=dict)
    """``repair_tool_call``'s outcomes, by tool call id (only calls that did not validate)."""


class ToolResultRecord(BaseModel):
    tool_call_id: str
    tool_name: str
    step: int
    output: Any = None
    is_error: bool = False
    blocked: bool = False
    duration_ms: float = 0.0
    approval: dict[str, Any] | None = None
    """For a tool that needed approval: ``{"approved": bool, "reason": str | None}``."""
    outcome: ToolCallOutcome | None = None
    """What became of the call (``contract.ToolCallOutcome``): ``"ran"``, ``"blocked"``,
    ``"substituted"``, ``"denied"``…; None on results recorded before the field existed
    (``blocked`` then tells a blocked or substituted call from one that ran)."""


class TurnState(BaseModel):
    """What an activity of a turn reads before it acts, in one store round trip."""

    turn: TurnRecord
    steps: list[StepRecord]
    """The steps of the turn's current run, in order."""
    results: dict[str, ToolResultRecord]
    """The turn's tool results, by tool call id."""
    transcript: list[Message] | None = None
    """The conversation's messages, oldest first, when asked for (without superseded ones,
    as ``TranscriptStore.messages``)."""


class ParsedMessages:
    """Parsed messages by their stored JSON body, shared by every read of the process.

    Each model step of a turn reads the whole transcript again, and parsing it (pydantic
    models for every part) was the largest cost of a step on a long conversation. Rows are
    still read from the store every time, so what the store holds is always what is
    returned; only a body already seen (the very same text) is not parsed again.

    The messages it returns are therefore shared: the engine only reads them, and user code
    that receives transcript messages (hooks, a session's summariser or token counter) gets
    its own copies (``messages.copied``). Bounded by ``max_chars`` characters of body text
    (8 million by default, some 2 million tokens of transcript), least recently used out
    first; a body larger than the bound is parsed every time.
    """

    def __init__(self, max_chars: int = 8_000_000) -> None:
        self.max_chars = max_chars
        self._parsed: OrderedDict[str, Message] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def __call__(self, bodies: Iterable[str]) -> list[Message]:
        out: list[Message] = []
        with self._lock:
            for body in bodies:
                message = self._parsed.get(body)
                if message is None:
                    message = Message.model_validate_json(body)
                    self._add(body, message)
                else:
                    self._parsed.move_to_end(body)
                out.append(message)
        return out

    def _add(self, body: str, message: Message) -> None:
        if len(body) > self.max_chars:
            return
        self._parsed[body] = message
        self._chars += len(body)
        while self._chars > self.max_chars:
            old, _ = self._parsed.popitem(last=False)
            self._chars -= len(old)

    def __len__(self) -> int:
        return len(self._parsed)


parse_messages = ParsedMessages()
"""Stored message bodies (JSON), in their order, as (shared) messages."""

SUPERSEDED_BY = "superseded_by"
"""The metadata key ``messages(superseded=True)`` reports a superseded message's mark under."""


def parse_marked_messages(rows: Iterable[tuple[str, str | None]]) -> list[Message]:
    """Stored (body, superseded_by) rows as messages, each superseded one a copy with
    ``metadata["superseded_by"]`` (the shared parsed messages are never changed)."""
    rows = list(rows)
    messages = parse_messages(body for body, _ in rows)
    return [
        m if by is None else m.model_copy(update={"metadata": {**m.metadata, SUPERSEDED_BY: by}})
        for m, (_, by) in zip(messages, rows, strict=True)
    ]


def parse_steps(bodies: Iterable[str]) -> list[StepRecord]:
    """Stored step bodies (JSON), in their order, as step records."""
    return [StepRecord.model_validate_json(body) for body in bodies]


def parse_tool_results(bodies: Iterable[str]) -> dict[str, ToolResultRecord]:
    """Stored tool result bodies (JSON) as records, by tool call id."""
    records = [ToolResultRecord.model_validate_json(body) for body in bodies]
    return {r.tool_call_id: r for r in records}


_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")
_QUERY_PASSWORD = re.compile(r"((?:^|[?&;\s])password=)[^&;\s]*", re.I)


def mask_url(url: str) -> str:
    """A store or stream URL fit for errors and logs: its password becomes ``***``."""
    return _QUERY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", url))


ID_FIELDS = ("id", "conversation_id", "turn_id", "request_id", "tool_call_id", "message_id")
STORE_METHODS = (
    "add_messages",
    "put_message",
    "messages",
    "supersede_messages",
    "save_turn",
    "claim_turn",
    "get_turn",
    "last_turn_number",
    "save_step",
    "steps",
    "save_tool_result",
    "tool_results",
    "turn_state",
)


def check_ids(value: Any) -> None:
    """Refuse ids with a NUL character (PostgreSQL cannot store one) with a typed,
    non-retryable ``InvalidRequest``, at once, instead of a minute of retries."""
    if isinstance(value, str):
        bad = "\x00" in value
    elif isinstance(value, BaseModel):
        bad = any("\x00" in v for f in ID_FIELDS if isinstance(v := getattr(value, f, None), str))
    elif isinstance(value, list | tuple):
        for item in value:
            check_ids(item)
        return
    else:
        return
    if bad:
        raise ApplicationError(
            "an id contains a NUL character: ids are text without NUL",
            type=INVALID_REQUEST,
            non_retryable=True,
        )


def _checking_ids(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        for value in (*args, *kwargs.values()):
            check_ids(value)
        return await fn(self, *args, **kwargs)

    return checked


class TranscriptStore(abc.ABC):
    """Async, idempotent persistence for conversations. Implementations: SQLite, PostgreSQL.

    Every implementation's reads and writes refuse ids with a NUL character (``check_ids``).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in STORE_METHODS:
            fn = cls.__dict__.get(name)
            if fn is not None and not getattr(fn, "__isabstractmethod__", False):
                setattr(cls, name, _checking_ids(fn))

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and create or migrate the schema."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    # messages
    # Writes that name an ``owner`` go into a turn only while that run owns it (or the turn
    # record predates owners), else raise TurnNotOwned; the check and the write are atomic.

    @abc.abstractmethod
    async def add_messages(
        self,
        conversation_id: str,
        messages: list[Message],
        turn_id: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        """Append messages; a message whose id is already stored is left as it is."""

    @abc.abstractmethod
    async def put_message(
        self,
        conversation_id: str,
        message: Message,
        turn_id: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        """Insert or replace one message (keeps its position in the transcript)."""

    @abc.abstractmethod
    async def messages(self, conversation_id: str, *, superseded: bool = False) -> list[Message]:
        """The transcript, oldest first, without the messages a regeneration superseded
        (what every context is built from). ``superseded``: every stored message, each
        superseded one a copy with ``metadata["superseded_by"]`` set to the turn that
        superseded it (see :meth:`supersede_messages`)."""

    @abc.abstractmethod
    async def supersede_messages(
        self,
        conversation_id: str,
        from_message_id: str | None,
        turn_id: str,
        *,
        owner: str | None = None,
    ) -> list[str]:
        """Mark message ``from_message_id`` and every message stored after it superseded by
        ``turn_id`` (a turn that regenerates it), in one transaction. They stay stored
        (bodies unchanged), :meth:`messages` leaves them out from then on, and
        ``messages(superseded=True)`` reports them. A message superseded already (by an
        earlier regeneration) keeps its mark.

        Keyed by ``turn_id``: once some message of the conversation is marked by it, nothing
        more is marked and those ids are returned, whatever ``from_message_id`` says (a
        retried activity marks once). Returns the ids marked by ``turn_id``, oldest first;
        [] and nothing marked when ``from_message_id`` is None (a question only) or names no
        message of the conversation that is not superseded. With ``owner``, only while that
        run owns turn ``turn_id`` (else TurnNotOwned); a run that takes the turn over
        (:meth:`claim_turn`) clears the marks the turn made before."""

    # turns
    @abc.abstractmethod
    async def save_turn(self, turn: TurnRecord) -> None:
        """Insert or replace a turn record. With ``turn.owner`` set, only while that run owns
        the turn (else TurnNotOwned); without, the stored owner is kept."""

    @abc.abstractmethod
    async def claim_turn(self, turn: TurnRecord) -> TurnRecord | None:
        """Begin ``turn`` for ``turn.owner`` (see :func:`claim_decision`): store the record,
        first deleting the steps, tool results and messages of a run it takes the turn over
        from, and return it. A run's own retry keeps what the stored record counted
        (:func:`claimed`). None, and nothing written, when the turn is not this run's to
        take."""

    @abc.abstractmethod
    async def get_turn(self, turn_id: str) -> TurnRecord | None: ...

    @abc.abstractmethod
    async def last_turn_number(self, conversation_id: str) -> int:
        """The highest turn number stored for the conversation, 0 if none."""

    # steps
    @abc.abstractmethod
    async def save_step(
        self, turn_id: str, step: StepRecord, *, owner: str | None = None
    ) -> StepRecord:
        """Store a step's output unless one is stored already; return the stored one."""

    @abc.abstractmethod
    async def steps(self, turn_id: str, run: int) -> list[StepRecord]:
        """The steps of one run of a turn, in order."""

    # tool results
    @abc.abstractmethod
    async def save_tool_result(
        self, turn_id: str, result: ToolResultRecord, *, owner: str | None = None
    ) -> ToolResultRecord:
        """Store a tool result unless one is stored for that call id; return the stored one."""

    @abc.abstractmethod
    async def tool_results(self, turn_id: str) -> dict[str, ToolResultRecord]:
        """The tool results of a turn, by tool call id."""

    async def turn_state(self, turn_id: str, *, transcript: bool = False) -> TurnState | None:
        """A turn's record, the steps of its current run and its tool results (and, with
        ``transcript``, its conversation's messages); None if no turn has that id. The
        backends read it all in one round trip; this default reads it piece by piece."""
        turn = await self.get_turn(turn_id)
        if turn is None:
            return None
        return TurnState(
            turn=turn,
            steps=await self.steps(turn_id, turn.run),
            results=await self.tool_results(turn_id),
            transcript=await self.messages(turn.conversation_id) if transcript else None,
        )

    async def __aenter__(self) -> TranscriptStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
