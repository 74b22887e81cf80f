"""The public wire contract: names, defaults and the I/O types of workflows and activities.

Clients (any language), workflows and activities all import this one module. Every type
is a JSON object with snake_case fields and defaults, so it can grow without breaking
running workflows. Workflow, signal, query, update and activity names below are persisted
compatibility data: running workflows replay against them, so never rename them casually.

Why it is long (about 1,000 lines): it is the whole wire contract in one place, the one file a
client in another language reads, and a module the workflow sandbox passes through whole;
split, the persisted names and the types that carry them would scatter across files.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from temporalio.common import SearchAttributeKey

from durable_turns.errors import EmptyMessage, InvalidId, InvalidMetadata
from durable_turns.messages import Message, TextPart, Usage

# --- names ---------------------------------------------------------------------------------

DEFAULT_TASK_QUEUE = "durable-turns"
CONVERSATION_WORKFLOW = "ConversationWorkflow"
TURN_WORKFLOW = "TurnWorkflow"

SIGNAL_SUBMIT = "submitMessages"
SIGNAL_CONTINUE = "continueLastTurn"
SIGNAL_CANCEL = "cancelChat"
SIGNAL_TOOL_RESULT = "submitToolResult"
"""On the conversation: a client tool's result or an approval, for the running turn."""
SIGNAL_ADD = "addMessages"
"""Messages appended to the transcript without a turn (Think's ``addMessages()``), in the
order of the turn queue."""
TURN_SIGNAL_TOOL_RESULT = "toolResult"
"""The same, sent to a turn directly."""
TURN_SIGNAL_AGENT_WAIT = "agentWait"
"""A sub-agent's turn tells its parent turn which of its calls wait for the client (the
parent lists them as its own, under :func:`agent_call_id`, and forwards their answers)."""
UPDATE_SEND = "sendMessage"
UPDATE_START = "startTurn"
"""Like ``sendMessage``, but answers as soon as the turn has started (its ``RequestRecord``:
turn number and workflow id), so a client streams it and awaits its result without polling."""
QUERY_STATE = "state"

# Activity names: the workflows schedule them by these strings and the activities register
# under them, so both sides import them from here.
OPEN_CONVERSATION_WITH_DEFAULTS = "open_conversation_with_defaults"
"""The conversation's last stored turn number, and the worker's defaults for it
(``ConversationOpened``)."""
BEGIN_TURN = "begin_turn"
MODEL_STEP = "model_step"
TOOL_CALL = "tool_call"
COMPACT = "compact"
FINISH_TURN = "finish_turn"
FAIL_TURN = "fail_turn"
CHAT_RESPONSE = "chat_response"
INTAKE_PAUSE = "intake_pause"
ADD_MESSAGES = "add_messages"
RELAY_AGENT = "relay_agent"
MARK_CANCEL = "mark_cancel"
"""A local activity of the conversation: the cancel mark that stops the running turn's model
step at once (``streams.cancel``)."""
"""The activity that appends an ``addMessages`` request's messages to the transcript."""
"""A local activity that does nothing: the inbox schedules it to end one workflow activation
between two rounds of parsing signals (a timer would wait the server's timer tick, ~1 s)."""

DEFAULT_MAX_STEPS = 10
DEFAULT_MODEL = "demo:weather"
"""The model when none is configured anywhere: an offline scripted stand-in, not an LLM."""

# --- limits (docs/limits.md) ---------------------------------------------------------------

MAX_REQUEST_BYTES = 256 * 1024
"""A client request (``submitMessages``, ``sendMessage``, ``continueLastTurn``, ``cancelChat``)
larger than this many bytes of encoded payload is rejected (``RequestTooLarge``) before it is
parsed: it would bloat history toward Temporal's 2 MB payload limit."""

MAX_TOOL_RESULT_BYTES = 256 * 1024
"""A ``submitToolResult`` (or a turn's ``toolResult``) larger than this is rejected
(``RequestTooLarge``): it is forwarded to the turn and becomes an activity input."""

MAX_ID_BYTES = 512
"""Conversation ids and request ids: 1 to this many UTF-8 bytes, no NUL or other control
characters, and no ``/turn-<digit>`` (the pattern of turn ids, see :func:`turn_workflow_id`).
Temporal's own limit on a workflow id is 1,000 bytes; a turn id adds ``/turn-<n>`` and,
when that id is taken, a retry suffix, so the derived turn id always fits."""

MAX_MESSAGE_ID_BYTES = 128
"""A client-chosen message id: 1 to this many bytes, the id rules above and no ``/``. It is
scoped to its request: the stored id is ``<request id>/<message id>``."""

MAX_STORED_MESSAGE_ID_BYTES = MAX_ID_BYTES + 1 + MAX_MESSAGE_ID_BYTES
"""A stored message id (what ``SubmitMessages.regenerate`` names): the id rules above, up
to this many bytes, and ``/turn-<n>`` allowed (an assistant message's stored id is
``<conversation id>/turn-<n>/assistant``, a user message's ``<request id>/<message id>``)."""

REGENERATE_LAST = "last"
"""``SubmitMessages.regenerate``: the reply the transcript ends with."""

MAX_MODEL_ID_BYTES = 256
"""A ``provider:model`` id: at most this many bytes (the ``TurnModel`` search attribute
holds it; Temporal refuses a keyword search attribute over 2 KiB)."""

MAX_STORED_REQUEST_BYTES = 512 * 1024
"""A request as the conversation keeps it (its parsed messages, their ids scoped to the request,
and its body, as JSON) over this many bytes is rejected (``RequestTooLarge``). It is the turn's
input and is carried over continue-as-new while queued; parsing can make a request many times
larger than it came (a 240 KB request of 8,000 tiny messages with a 500-byte request id is 4.6 MB
once every message carries its scoped id), so the payload limit alone bounds nothing."""

MAX_METADATA_BYTES = 16 * 1024
"""A request's ``metadata`` (a JSON object, encoded as compact UTF-8 JSON) over this many bytes is
rejected (``InvalidRequest``; the Python client raises ``InvalidMetadata`` before sending). It
is carried, whole, in the turn's input, its stored record and its result, and over
continue-as-new with the conversation's last request."""

MAX_QUEUED_REQUESTS = 1000
"""Requests a conversation holds waiting for their turn; past it, ``QueueFull``."""

MAX_QUEUED_BYTES = 512 * 1024
"""Total size of the queued requests as stored (:data:`MAX_STORED_REQUEST_BYTES`); past it,
``QueueFull``. The queue is carried over continue-as-new, so this keeps what is carried far
under the 2 MB payload limit."""

MAX_CARRIED_RESULT_BYTES = 128 * 1024
"""Recent turn results carried over continue-as-new (for retried ``sendMessage`` updates);
older results, or results that do not fit, answer a retry with ``RequestExpired``."""

MAX_CARRIED_BYTES = 1536 * 1024
"""All that continue-as-new carries, measured as it is sent; over it, the recent results, then
the rejected records, then the finished records are left behind (oldest first) until it fits.
The queue is always carried whole (it is bounded by :data:`MAX_QUEUED_BYTES`)."""

MAX_ERROR_MESSAGE_CHARS = 1000
"""An ``ErrorInfo.message`` longer than this is cut (with ``…``): errors travel in every result,
record and ``state`` answer, and are carried over continue-as-new."""

MAX_PROBLEM_CHARS = 120
"""A validation problem names the field it is about: a client's own key (an extra field) is
shown cut to this, so a rejection never echoes the request back."""

UNDECRYPTABLE_ENCODING = b"binary/undecryptable"
"""The encoding the codec gives a payload it cannot decrypt (tampered, malformed) instead of
failing the whole workflow task; a signal or update carrying one is rejected as
``InvalidPayload``, anything else fails to convert where it is used."""

TURN_ID_PATTERN = re.compile(r"/turn-[0-9]")
"""What no client-chosen conversation or request id may contain: every turn's workflow id
does (``<conversation id>/turn-<n>``), so no id a client can start ever collides with one."""

MAX_AGENT_TASK_BYTES = 64 * 1024
"""The task an agent tool hands its sub-agent (the child's first user message, rendered from
the call's input): it travels through the workflow history, so it is bounded; a longer one is
an ``AgentTaskTooLarge`` error result the parent's model sees."""

MAX_TOOL_OUTPUT_BYTES = 1024 * 1024
"""A tool's output (as JSON) over this many bytes is not stored nor shown to the model: the
model gets a ``ToolOutputTooLarge`` error result instead (every later step would resend it)."""

MAX_RESULT_TEXT_BYTES = 64 * 1024
"""TurnResult.text carries at most this much of a reply (UTF-8); the whole reply is the stored
message ``TurnResult.message_id`` (``text_truncated`` says when it was cut)."""

# Error types that cross the activity boundary (``ApplicationError.type``); the workflow's
# retry policies name them, so they are persisted compatibility data too.
PROVIDER_TRANSIENT = "ProviderTransientError"
PROVIDER_ERROR = "ProviderError"
STREAM_STALLED = "StreamStalled"
HOOK_ERROR = "HookError"
INVALID_REQUEST = "InvalidRequest"
INVALID_MODEL = "InvalidModel"
INVALID_ID = "InvalidId"
"""A conversation, request or message id breaks the id rules (:data:`MAX_ID_BYTES`)."""
EMPTY_MESSAGE = "EmptyMessage"
"""A request to run a turn holds a message with nothing in it: no parts, or only text that is
empty or whitespace (:func:`empty_message_problem`)."""
INVALID_PAYLOAD = "InvalidPayload"
"""A signal or update payload that cannot be decoded (not JSON, bad UTF-8, too deep,
undecryptable)."""
REQUEST_TOO_LARGE = "RequestTooLarge"
CONVERSATION_BUSY = "ConversationBusy"
"""A request refused because a turn is running or queued and the conversation's message
concurrency is ``drop``."""
UNKNOWN_SIGNAL = "UnknownSignal"
"""A signal of a name the workflow does not take (a typo, another workflow's signal): recorded
as a rejection, not kept waiting for a handler that never comes."""
QUEUE_FULL = "QueueFull"
"""The conversation's queue is at :data:`MAX_QUEUED_REQUESTS` or :data:`MAX_QUEUED_BYTES`."""
REQUEST_EXPIRED = "RequestExpired"
"""A retried ``sendMessage`` whose result is no longer held (older than the recent window)."""
HANDED_OVER = "ContinuedAsNew"
"""A ``sendMessage`` update was waiting when the conversation continued-as-new with its
request still queued: retry the update with the same request id (``TurnsClient.send`` does)."""
TURN_START_FAILED = "TurnStartFailed"
"""The conversation could not start the turn's child workflow (its ids were all taken)."""
MESSAGE_ID_CONFLICT = "MessageIdConflict"
"""A request reuses one message id for two messages."""
WORKER_SHUTDOWN = "WorkerShutdown"
"""A worker stopped mid-step past its shutdown grace: the step is re-run in full."""
HANDED_OVER_KEY = "handed_over"
"""A detail of a ``WorkerShutdown`` failure (``{HANDED_OVER_KEY: True}``): the worker, shutting
down, handed its running model step over at once (``streams.liveness``'s ``hand_over``), so
the next attempt need not wait (``workflows.options.with_budgets``)."""
HANDOVER_PATCH = "handover"
"""The patch under which a turn retries a handed-over attempt at once, with no timer."""
WORKER_LOST = "WorkerLost"
"""A model step's or tool call's worker stopped beating in the chunk stream
(``streams.liveness``): another worker failed the attempt for it, a heartbeat timeout ahead
of time (details: the dead worker's ``heartbeats.share``)."""
LIVENESS_PATCH = "liveness"
"""The patch under which a turn counts a ``WorkerLost`` failure as a heartbeat timeout."""
LOST_AT_ONCE_KEY = "retry_at_once"
"""A detail of a ``WorkerLost`` failure (``{LOST_AT_ONCE_KEY: True}``, set by the watcher that
failed the attempt): the turn retries it with no retry timer while its losses weigh one
death at most, for the detection window (``TURNS_LIVENESS_MS``) was its wait
(``workflows.options.lost_wait``). Versioned by the recorded failure, not by a patch (a
patch costs a ``TemporalChangeVersion`` upsert, a billable action, per turn): a
``WorkerLost`` recorded by an earlier release lacks it, and its retry waits its timer."""
TURN_TASK_TIMEOUT_S = 2.5
"""The workflow task timeout of a turn's workflow (Temporal's default is 10 s): how long a
workflow task that a worker started and never finished (it died meanwhile: while a begin or
finish local activity ran in it, or while it replayed) waits before another worker runs it.
A local activity longer than this keeps its task alive (the SDK heartbeats it every 0.8 ×
this, three history events each); a task's own work takes milliseconds (a turn's history
is a few KB a step, so even a replay on another worker is short: measured in
``bench.recovery``, whose target is the slowest task under half of this). Set on the child
start of a conversation's turn and of a sub-agent's turn (a new child's option: histories
recorded before replay alike). See docs/operations.md, "Recovery"."""
CHUNK_STREAM_UNAVAILABLE = "ChunkStreamUnavailable"
"""A model step saved its output but could not write it to the live chunk stream within
``stream_write_timeout_s``: the next attempt (another worker, perhaps) writes the saved step
again instead of asking the model; the last attempt goes on without the stream."""
TOOL_OUTPUT_TOO_LARGE = "ToolOutputTooLarge"
"""A tool returned more than :data:`MAX_TOOL_OUTPUT_BYTES`."""
TOOL_TIMEOUT = "ToolTimeout"
TOOL_ERROR = "ToolError"
"""A tool that timed out or raised, retried as a new attempt (only with ``@tool(retries=…)``)."""
WORKER_CRASH_LOOP = "WorkerCrashLoop"
"""The worker running one activity of a turn (a model step, a tool call, a compaction, a
hook) died more often than ``TurnPlan.crash_retries`` allows (an OOM kill or a native crash
on every attempt, or a deploy storm that long): the turn ends ``error``, naming the activity."""
STORE_UNAVAILABLE = "StoreUnavailable"
"""The transcript store could not be reached for as long as the activity attempt could wait
(retryable: the next attempt waits again)."""
NOTHING_TO_REGENERATE = "NothingToRegenerate"
"""A regenerate request names no assistant message of the conversation's transcript (an
unknown id, a user message, a message superseded already), or ``"last"`` finds no reply at
the transcript's end: the turn ends ``error`` and nothing is marked."""
TURN_TAKEN_OVER = "TurnTakenOver"
UNKNOWN_AGENT = "UnknownAgent"
"""A sub-agent's turn names an agent tool this worker does not have (``TurnInput.agent``)."""
AGENT_CLIENT_TOOL = "AgentClientTool"
"""No longer raised: a sub-agent's client tools and approvals reach the parent's client
(:func:`agent_call_id`). Kept for code that matched on it."""
UNKNOWN_TOOL_CALL = "UnknownToolCall"
"""An answer names a sub-agent's call (:data:`AGENT_CALL_PREFIX`) that no running sub-agent
of the turn has."""
AGENT_TASK_TOO_LARGE = "AgentTaskTooLarge"
"""An agent tool's task (its rendered input) is over :data:`MAX_AGENT_TASK_BYTES`."""
AGENT_FAILED = "AgentFailed"
"""A sub-agent's turn did not complete (error, aborted, or its workflow failed): the parent's
tool call gets an error result naming it."""
"""The turn's stored data belongs to another workflow run (``TurnRef.owner``): this run may
not write into it (non-retryable)."""

CONTINUE_PROMPT = (
    "Continue your previous response from exactly where it left off. Do not repeat any of it."
)

# Search attributes, registered by the embedded server (see durable_turns.devserver).
CONVERSATION_ID = SearchAttributeKey.for_keyword("ConversationId")
TURN_STATUS = SearchAttributeKey.for_keyword("TurnStatus")
TURN_MODEL = SearchAttributeKey.for_keyword("TurnModel")
SEARCH_ATTRIBUTES = (CONVERSATION_ID, TURN_STATUS, TURN_MODEL)


def model_attribute(model: str) -> str:
    """``TurnModel``'s value for ``model``: cut to :data:`MAX_MODEL_ID_BYTES` (a keyword search
    attribute over 2 KiB would get the turn terminated)."""
    return model.encode("utf-8", errors="replace")[:MAX_MODEL_ID_BYTES].decode(
        "utf-8", errors="ignore"
    )


def validation_problems(error: ValidationError, limit: int | None = None) -> str:
    """A pydantic error as one line a client (or a model) can act on: ``field: problem; …``
    (without pydantic's own wording around it: "1 validation error for …", "Value error, ").
    Each field name and problem is cut to :data:`MAX_PROBLEM_CHARS` (a client's extra key can
    be as long as its request)."""
    return "; ".join(
        f"{_cut('.'.join(_cut(str(x)) for x in e['loc'])) or 'input'}: {_cut(_plain(e['msg']))}"
        for e in error.errors(include_url=False, include_input=False)[:limit]
    )


def _plain(message: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message


def _cut(text: str, limit: int = MAX_PROBLEM_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def id_problem(
    value: object,
    what: str = "conversation id",
    max_bytes: int = MAX_ID_BYTES,
    *,
    turn_ids: bool = False,
) -> str | None:
    """Why ``value`` is not a valid id (None when it is): the rules of :data:`MAX_ID_BYTES`
    (``turn_ids``: ``/turn-<digit>`` allowed, as in the ids the engine stores)."""
    if not isinstance(value, str):
        return f"{what} must be a string"
    if not value:
        return f"{what} is empty"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{what} is not valid Unicode (a lone surrogate)"
    if size > max_bytes:
        return f"{what} is {size} bytes; the limit is {max_bytes} bytes"
    if not value.isprintable() and any(unicodedata.category(c) == "Cc" for c in value):
        return f"{what} contains a NUL or another control character"
    if not turn_ids and TURN_ID_PATTERN.search(value):
        return f"{what} contains '/turn-<digit>', which is reserved for turn ids"
    return None


def message_id_problem(value: str) -> str | None:
    """Why a client-chosen message id is not valid (None when it is)."""
    problem = id_problem(value, "message id", MAX_MESSAGE_ID_BYTES)
    if problem is None and "/" in value:
        problem = "message id contains '/', which is reserved for scoping"
    return problem


def regenerate_problem(value: str) -> str | None:
    """Why ``value`` cannot be a ``regenerate`` target (None when it can): ``"last"`` or a
    stored message id (:data:`MAX_STORED_MESSAGE_ID_BYTES`)."""
    if value == REGENERATE_LAST:
        return None
    return id_problem(value, "regenerate", MAX_STORED_MESSAGE_ID_BYTES, turn_ids=True)


def model_id_problem(value: str) -> str | None:
    """Why a model id is not acceptable (None when it is)."""
    size = len(value.encode("utf-8", errors="replace"))
    if size > MAX_MODEL_ID_BYTES:
        return f"model id is {size} bytes; the limit is {MAX_MODEL_ID_BYTES} bytes"
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in value):
        return "model id contains a control character"
    return None


def metadata_problem(value: object) -> str | None:
    """Why ``value`` cannot be a request's ``metadata`` (None when it can): a JSON object
    (string keys; values JSON: no NaN or infinity, valid Unicode) of at most
    :data:`MAX_METADATA_BYTES` as compact JSON."""
    if not isinstance(value, dict):
        return f"metadata must be a JSON object, not {type(value).__name__}"
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "metadata is not valid Unicode (a lone surrogate)"
    except (TypeError, ValueError) as e:
        return f"metadata must hold JSON values only ({_cut(str(e))})"
    except RecursionError:
        return "metadata is nested too deeply"
    if any(not isinstance(k, str) for k in value):
        return "metadata keys must be strings"
    if size > MAX_METADATA_BYTES:
        return f"metadata is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES} bytes"
    return None


def _valid_metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    problem = metadata_problem(value) if value is not None else None
    if problem:
        raise ValueError(problem)
    return value


def check_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """``metadata`` (``{}`` for None) if valid; raises :class:`InvalidMetadata` otherwise."""
    if metadata is None:
        return {}
    problem = metadata_problem(metadata)
    if problem:
        raise InvalidMetadata(problem)
    return metadata


def empty_message_problem(messages: Iterable[Message]) -> str | None:
    """Why messages sent to run a turn cannot be (None when they can): one of them holds
    nothing, no part, or only text parts that are empty or whitespace (a file, a tool call,
    any other part counts as content). ``turns chat c ""`` would otherwise run a whole turn
    on nothing. Checked by the Python client (raising :class:`EmptyMessage` before sending),
    the ``turns`` command and the conversation's ``sendMessage``/``startTurn`` validator
    (rejected as :data:`EMPTY_MESSAGE`)."""
    for i, message in enumerate(messages):
        if not any(not isinstance(p, TextPart) or p.text.strip() for p in message.parts):
            what = "has no content" if not message.parts else "has only empty text"
            return f"message {i} ({message.role}) {what}: a turn needs something to answer"
    return None


def check_not_empty(messages: list[Message]) -> list[Message]:
    """``messages`` if none is empty; raises :class:`EmptyMessage` otherwise."""
    problem = empty_message_problem(messages)
    if problem:
        raise EmptyMessage(problem)
    return messages


def check_conversation_id(conversation_id: str) -> str:
    """``conversation_id`` if valid; raises :class:`InvalidId` with the reason otherwise."""
    problem = id_problem(conversation_id)
    if problem:
        raise InvalidId(problem)
    return conversation_id


def turn_workflow_id(conversation_id: str, turn_number: int) -> str:
    """A turn's workflow id: ``<conversation id>/turn-<n>``, readable and unique."""
    return f"{conversation_id}/turn-{turn_number}"


def turn_id(conversation_id: str, turn_number: int) -> str:
    """The key of a turn in the transcript store (the same string as its workflow id)."""
    return turn_workflow_id(conversation_id, turn_number)


AGENT_CALL_PREFIX = "agent:"
"""Every id under which a parent turn shows a sub-agent's waiting call starts with it (a
provider's own tool call ids never do: Anthropic's are ``toolu_…``, OpenAI's ``call_…``)."""


def agent_call_id(agent_call: str, child_call: str) -> str:
    """The id a parent turn's client sees for its sub-agent's call ``child_call`` (a client
    tool or an approval), made in the call ``agent_call`` of an agent tool:
    ``agent:<agent call id>/<child call id>``. A sub-agent of a sub-agent nests:
    ``agent:a/agent:b/c``."""
    return f"{AGENT_CALL_PREFIX}{agent_call}/{child_call}"


def split_agent_call_id(call_id: str, agent_calls: Iterable[str]) -> tuple[str, str] | None:
    """``(agent call id, child call id)`` for an id :func:`agent_call_id` made with one of
    ``agent_calls`` (the longest that fits), else None."""
    if not call_id.startswith(AGENT_CALL_PREFIX):
        return None
    rest = call_id[len(AGENT_CALL_PREFIX) :]
    fits = [a for a in agent_calls if rest.startswith(f"{a}/") and len(rest) > len(a) + 1]
    if not fits:
        return None
    agent = max(fits, key=len)
    return agent, rest[len(agent) + 1 :]


def agent_conversation_id(conversation_id: str, turn_number: int, tool_call_id: str) -> str:
    """The child conversation a sub-agent's call runs in: ``<conversation id>/agent-<turn
    number>-<tool call id>``, so the same call always names the same child (a parent that
    replays on another worker finds its child, never starts a second). The turn number is in
    it because a provider's tool call ids need only be unique within a turn. An id that would
    break the id rules (too long, a tool call id with ``/turn-<digit>`` or control characters)
    ends in a SHA-256 of the three instead."""
    child = f"{conversation_id}/agent-{turn_number}-{tool_call_id}"
    if id_problem(child) is None:
        return child
    digest = hashlib.sha256(
        f"{conversation_id}\0{turn_number}\0{tool_call_id}".encode()
    ).hexdigest()
    head = conversation_id.encode("utf-8")[: MAX_ID_BYTES - 80].decode("utf-8", errors="ignore")
    while TURN_ID_PATTERN.search(f"{head}/agent-{turn_number}-"):  # a cut that made one
        head = head[:-1]
    return f"{head}/agent-{turn_number}-{digest[:40]}"


class _Wire(BaseModel):
    """What a client sends: an unknown key is a typed rejection (a typo is never ignored)."""

    model_config = ConfigDict(extra="forbid")


class Internal(BaseModel):
    """What the engine's own workflows and activities hand each other (activity inputs and
    results, a turn's input and result, what a conversation keeps of its requests), and what
    it answers clients with: a tolerant reader. During a rolling deploy two versions of the
    worker serve one task queue, and either may read what the other wrote: unknown fields
    are ignored and a field a newer version added has a default (docs/deployment.md,
    "Rolling deploys")."""

    model_config = ConfigDict(extra="ignore")


# --- what clients send ---------------------------------------------------------------------


MessageConcurrency = Literal["queue", "latest", "merge", "drop", "debounce"]
"""What a message does that arrives while a turn runs or waits (Think's ``messageConcurrency``):
``queue`` waits its turn (the default); ``merge`` joins the messages waiting behind the
running turn, answered together in one next turn; ``latest`` also cancels the running turn
(as ``cancelChat``: it ends ``aborted`` with what it streamed) so the waiting messages are
answered at once; ``drop`` is refused (``ConversationBusy``); ``debounce`` merges too and
starts the turn only once no new message came for ``debounce_ms``."""

DEFAULT_DEBOUNCE_MS = 750
"""Think's default debounce."""
MAX_DEBOUNCE_MS = 60_000


def _checked_messages(messages: list[Message]) -> list[Message]:
    """Every message has content; client ids follow the id rules, each once."""
    seen: set[str] = set()
    for i, message in enumerate(messages):
        if not message.parts:
            raise ValueError(f"message {i} has no content")
        if message.id:
            problem = message_id_problem(message.id)
            if problem:
                raise ValueError(f"message {i}: {problem}")
            if message.id in seen:
                raise ValueError(f"message {i}: id {message.id!r} is used twice")
            seen.add(message.id)
    return messages


class SubmitMessages(_Wire):
    """``submitMessages`` signal / ``sendMessage`` / ``startTurn`` update: new messages that
    start a turn, or (``regenerate``) a turn that answers an earlier user message again."""

    messages: list[Message] = Field(default_factory=list, fail_fast=True)
    """At least one, unless ``regenerate`` is set; then none. Validation stops at the first
    invalid message (the rejection names it), so a rejection costs what one message does."""
    regenerate: str | None = None
    """Regenerate a reply instead of sending messages: the stored id of an assistant message
    (``<conversation id>/turn-<n>/assistant``) or ``"last"`` (the reply the transcript ends
    with). The turn answers the user message before that reply again; the reply (the whole
    reply, when continuations extended it) and every message after it stay in the store,
    marked superseded by the new turn, and leave every later context. Without ``model`` or
    ``body``, the last request's are used (as ``continueLastTurn`` does)."""
    request_id: str | None = None
    """Chosen by the client for idempotency and cancellation; generated when absent."""
    body: dict[str, Any] = Field(default_factory=dict)
    """Custom fields for the hooks (``TurnContext.body``)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The turn's metadata (Think's ``ChatOptions.metadata``): a JSON object of at most
    :data:`MAX_METADATA_BYTES`, stored with the turn, on every hook context (``metadata``),
    in the ``TurnResult`` and the turn's details in the Temporal UI. Without it, a
    ``regenerate`` request uses the last request's (as ``continueLastTurn`` does)."""
    model: str | None = None
    """A ``provider:model`` id for this turn."""
    message_concurrency: MessageConcurrency | None = None
    """What this message does if a turn is running or waiting (``MessageConcurrency``);
    without it, the conversation's setting."""
    debounce_ms: int | None = Field(default=None, ge=0, le=MAX_DEBOUNCE_MS)

    @field_validator("messages")
    @classmethod
    def _not_empty(cls, messages: list[Message]) -> list[Message]:
        return _checked_messages(messages)

    @field_validator("request_id")
    @classmethod
    def _request_id(cls, value: str | None) -> str | None:
        return _valid_request_id(value)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any]) -> dict[str, Any] | None:
        return _valid_metadata(value)

    @field_validator("regenerate")
    @classmethod
    def _regenerate(cls, value: str | None) -> str | None:
        problem = regenerate_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        problem = model_id_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _messages_or_regenerate(self) -> SubmitMessages:
        if self.regenerate is None and not self.messages:
            raise ValueError("messages: at least one message is needed (or regenerate)")
        if self.regenerate is not None and self.messages:
            raise ValueError(
                "messages: a regenerate request takes no messages (it answers the user"
                " message before the reply again)"
            )
        return self


def _valid_request_id(value: str | None) -> str | None:
    problem = id_problem(value, "request id") if value is not None else None
    if problem:
        raise ValueError(problem)
    return value


def added_request_id(message_ids: list[str]) -> str | None:
    """The request id an ``addMessages`` request without one gets when every message has an
    id (None when one has none)."""
    if not message_ids or not all(message_ids):
        return None
    digest = hashlib.sha256("\0".join(message_ids).encode()).hexdigest()
    return f"add-{digest[:32]}"


class AddMessages(_Wire):
    """``addMessages`` signal: messages appended to the transcript without running a turn
    (Think's ``addMessages()``): a system event, a note from a back office. Queued with the
    turns, so they land after the turns requested before them and before those requested
    after; the next turn's context has them."""

    messages: list[Message] = Field(min_length=1, fail_fast=True)
    """At least one; any role. Ids as in ``submitMessages`` (scoped to the request id)."""
    request_id: str | None = None
    """Idempotency: a request id the conversation knows is accepted once, and the store keeps
    a message id once. Without it, a request whose every message has an id gets one derived
    from those ids (so a re-sent note is a no-op); otherwise a new one."""

    @field_validator("messages")
    @classmethod
    def _checked(cls, messages: list[Message]) -> list[Message]:
        return _checked_messages(messages)

    def derived_request_id(self) -> str | None:
        """Without a request id, when every message has an id: one derived from those ids,
        so the same messages sent again are added once (None otherwise)."""
        return added_request_id([m.id for m in self.messages])

    @field_validator("request_id")
    @classmethod
    def _request_id(cls, value: str | None) -> str | None:
        return _valid_request_id(value)


class ContinueLastTurn(_Wire):
    """``continueLastTurn`` signal: continue the last assistant message."""

    body: dict[str, Any] | None = None
    request_id: str | None = None
    metadata: dict[str, Any] | None = None
    """The continuation's metadata (as ``SubmitMessages.metadata``); None: the last
    request's."""

    @field_validator("request_id")
    @classmethod
    def _request_id(cls, value: str | None) -> str | None:
        return _valid_request_id(value)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _valid_metadata(value)


class CancelChat(_Wire):
    """``cancelChat`` signal: cancel one request (queued or running), or the running turn."""

    request_id: str | None = None


class ToolResolution(_Wire):
    """``submitToolResult``: what the client decided for a call the turn is waiting on.

    For a client tool: ``output`` (and ``is_error``). For a tool that needs approval:
    ``approved`` (and an optional ``reason`` shown to the model on a denial).
    """

    tool_call_id: str
    output: Any = None
    is_error: bool = False
    approved: bool | None = None
    reason: str | None = None


class ConversationSettings(_Wire):
    """Optional input of ``ConversationWorkflow``; everything has a default."""

    model: str | None = None
    max_steps: int | None = None
    message_concurrency: MessageConcurrency | None = None
    """This conversation's default (a request's own ``message_concurrency`` wins; without
    either, the worker's ``TURNS_MESSAGE_CONCURRENCY``, else ``queue``)."""
    debounce_ms: int | None = Field(default=None, ge=0, le=MAX_DEBOUNCE_MS)

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        problem = model_id_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value


class PendingRequest(Internal):
    """A queued request, as a conversation holds it (and carries over continue-as-new)."""

    request_id: str
    kind: str = "submit"
    """``submit``, ``continue``, ``regenerate`` or ``add`` (``addMessages``: no turn)."""
    messages: list[Message] = Field(default_factory=list)
    body: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    regenerate: str | None = None
    """What a ``regenerate`` request names (``SubmitMessages.regenerate``)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The request's metadata (``SubmitMessages.metadata``)."""
    size: int = 0
    """Encoded bytes of the request (counts against ``MAX_QUEUED_BYTES``)."""
    concurrency: str | None = None
    """The request's own ``message_concurrency`` (None: the conversation's)."""
    debounce_ms: int | None = None
    merged: list[str] = Field(default_factory=list)
    """Requests whose messages were merged into this one (``merge``, ``latest``,
    ``debounce``): they finish with its turn."""


class ConversationInput(ConversationSettings):
    """``ConversationWorkflow``'s optional input: settings, plus the state continue-as-new
    carries. Defined here, not in the workflow module, so the workflow sandbox shares the
    class instead of rebuilding it for every conversation it runs."""

    turn_count: int | None = None
    queue: list[PendingRequest] = Field(default_factory=list)
    recent: list[RequestRecord] = Field(default_factory=list)
    last_result: TurnResult | None = None
    last_body: dict[str, Any] = Field(default_factory=dict)
    last_model: str | None = None
    last_metadata: dict[str, Any] = Field(default_factory=dict)
    """The last request's metadata: a continuation's, or a regeneration's, when it gives none."""
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    results: list[TurnResult] = Field(default_factory=list)
    """Recent results, so a retried ``sendMessage`` gets its answer after the hand-over."""
    rejected: list[RequestRecord] = Field(default_factory=list)
    rejected_count: int = 0
    worker_concurrency: MessageConcurrency | None = None
    """The worker's default as the first run read it (``ConversationOpened``), carried."""
    worker_debounce_ms: int | None = None


class ConversationOpened(Internal):
    """``open_conversation_with_defaults``'s result."""

    turn_count: int = 0
    message_concurrency: MessageConcurrency | None = None
    debounce_ms: int | None = None


# --- turn I/O ------------------------------------------------------------------------------

TurnStatus = Literal["completed", "error", "aborted", "skipped"]
RequestStatus = Literal["queued", "running", "completed", "error", "aborted", "skipped", "rejected"]


class ErrorInfo(Internal):
    type: str
    message: str
    """At most :data:`MAX_ERROR_MESSAGE_CHARS` (cut with ``…``)."""
    stage: str | None = None
    classification: str | None = None

    @field_validator("type", "message")
    @classmethod
    def _bounded(cls, value: str, info: Any) -> str:
        limit = MAX_ERROR_MESSAGE_CHARS if info.field_name == "message" else MAX_MODEL_ID_BYTES
        return _cut(value, limit)


class TurnInput(Internal):
    """Input of ``TurnWorkflow``. Carries the new messages only, never the transcript."""

    conversation_id: str
    turn_number: int = 1
    request_id: str = ""
    new_messages: list[Message] = Field(default_factory=list)
    continuation: bool = False
    body: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    max_steps: int | None = None
    regenerate: str | None = None
    """The assistant message this turn regenerates (``SubmitMessages.regenerate``); None for
    every other turn."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The turn's metadata (``SubmitMessages.metadata``); a turn started directly with
    metadata that breaks its rules (:data:`MAX_METADATA_BYTES`) ends ``error``
    (``InvalidRequest``) without touching anything."""
    agent: str | None = None
    """A sub-agent's turn: the name of the agent tool whose hooks, model, tools and system
    prompt it runs with (None: the worker's own)."""


class TurnResult(Internal):
    request_id: str
    conversation_id: str
    turn_number: int
    workflow_id: str
    status: TurnStatus
    text: str = ""
    text_truncated: bool = False
    """``text`` is the first MAX_RESULT_TEXT_BYTES of a longer reply: the whole reply is the
    stored message ``message_id`` (large text travels by reference, never through history)."""
    message_id: str | None = None
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    continuation: bool = False
    error: ErrorInfo | None = None
    auto_continue: bool = False
    """Client tool results or approvals arrived: the conversation continues the turn."""
    output: Any = None
    """The final answer parsed as JSON, when ``TurnConfig.output`` asked for structured output."""
    respond: bool = True
    """False when the worker's hooks do not override ``on_chat_response``: no activity runs."""
    cost_usd: float | None = None
    """Estimated from ``durable_turns.pricing`` (None: no price for the model, tokens only)."""
    usage_text: str = ""
    """``"41.2k in · 93% cached · 1.1k out · $0.0210"``."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The turn's metadata, as its request gave it (or the request it continues)."""


class RequestRecord(Internal):
    """What ``state`` shows of one request."""

    request_id: str
    kind: Literal["submit", "continue", "regenerate", "add"] = "submit"
    status: RequestStatus = "queued"
    turn_number: int | None = None
    error: ErrorInfo | None = None
    workflow_id: str | None = None
    """The turn's workflow id once it started: ``<conversation id>/turn-<n>``, or that id with
    a ``~<suffix>`` when something else had taken it."""
    merged_into: str | None = None
    """The request whose turn answers this one too (``merge``, ``latest``, ``debounce``)."""


class ConversationState(Internal):
    """The ``state`` query's answer."""

    conversation_id: str
    turn_count: int = 0
    running: RequestRecord | None = None
    queue: list[RequestRecord] = Field(default_factory=list)
    recent: list[RequestRecord] = Field(default_factory=list)
    last_result: TurnResult | None = None
    usage: Usage = Field(default_factory=Usage)
    """The conversation's tokens so far (this run and the runs before a continue-as-new)."""
    cost_usd: float | None = None
    """The sum of its turns' estimates (turns of unpriced models count tokens only)."""
    queued_count: int = 0
    """Requests waiting for their turn (``queue`` lists them)."""
    rejected_count: int = 0
    """Requests this conversation rejected (malformed, too large, queue full …) since it
    started; ``recent`` shows the last few."""
    waiting_for: str | None = None
    """Why the conversation is waiting, when it is: ``store``, ``queue_full``."""
    message_concurrency: str = "queue"
    """What a message that comes while a turn runs or waits does, unless it says otherwise."""


# --- activity I/O --------------------------------------------------------------------------


class TurnRef(Internal):
    """Identifies a turn; every activity input starts from it."""

    conversation_id: str
    turn_number: int
    request_id: str
    owner: str = ""
    """The TurnWorkflow run that runs the turn (its first execution run id): the store keeps
    the turn's steps, tool results and messages for that run alone. "" from before owners."""
    by_conversation: bool = False
    """The turn was started by its conversation (it may take the turn over from a run started
    elsewhere, never the other way round)."""
    agent: str | None = None
    """A sub-agent's turn: its agent tool's name (``TurnInput.agent``); every activity of the
    turn runs with that agent's hooks, tools and settings."""

    @property
    def turn_id(self) -> str:
        return turn_id(self.conversation_id, self.turn_number)


class StopCondition(Internal):
    """A declarative stop condition (functions cannot cross a workflow boundary)."""

    kind: Literal["has_tool_call", "step_count_is"]
    tool_name: str | None = None
    count: int | None = None


class BeginTurnInput(Internal):
    turn: TurnRef
    new_messages: list[Message] = Field(default_factory=list)
    continuation: bool = False
    body: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    max_steps: int | None = None
    attempt: int = 0
    """Re-runs of the turn after a compaction count up from 0."""
    regenerate: str | None = None
    """Mark the reply this names superseded by the turn before assembling its context."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The turn's metadata, stored with its record."""


class TurnPlan(Internal):
    """What ``begin_turn`` decided (the full TurnConfig stays in the store)."""

    model: str
    max_steps: int
    stop_when: list[StopCondition] = Field(default_factory=list)
    stall_timeout_ms: int = 0
    max_retries: int = 2
    step_timeout_s: float = 600.0
    tool_timeout_s: float = 300.0
    heartbeat_timeout_s: float = 30.0
    skip: bool = False
    """True when there is nothing to do (a continuation with no assistant message to continue)."""
    client_tool_timeout_s: float = 3600.0
    """How long a turn waits for client tool results and approvals."""
    overflow_retries: int = 0
    """Reactive compact-and-retry: how often a context overflow re-runs the turn (0: off)."""
    compact_at_tokens: int | None = None
    """Proactive: compact before the next step once a step's input tokens reach this."""
    max_compactions: int = 1
    crash_retries: int = 5
    """How often one activity of the turn is run again after its worker died
    (``TURNS_CRASH_RETRIES``); counted apart from ``max_retries``."""
    lean_upserts: bool = False
    """Set by every ``begin_turn`` since the change that spends fewer billable actions: the
    turn upserts ``TurnModel`` after it only when its start set another value, and sets it in
    its final upsert, with ``TurnStatus``, when its start set none. A recorded result versions
    the change as a patch marker would (a history ``begin_turn`` answered without it replays
    the upsert it made), without the ``TemporalChangeVersion`` upsert each new workflow that
    asks ``workflow.patched`` makes, itself a billable action (docs/deployment.md)."""


SHARE_KEY = "durable_turns_worker"
"""The key of the detail every activity heartbeat carries last: ``{SHARE_KEY: <the worker
process>, "turns": <how many turns have an activity running on it>}``. The workflow reads
it from a heartbeat timeout to weigh the death (``workflows.options.crash_cost``)."""


RecoveryReason = Literal["worker_lost", "worker_shutdown", "store_unavailable", "stalled"]
"""Why an attempt of an activity ended so that the next one is a recovery (Think's
``onChatRecovery``): its worker stopped heartbeating (killed, out of memory, frozen), shut
down past its grace, could not reach the transcript store, or its model stream stalled."""


class Recovery(Internal):
    """What the workflow knows of the attempt before this one, when that attempt was lost
    (``RecoveryReason``) rather than failed by the model or the tool: the next attempt is a
    recovery, shown on the live stream and asked of ``on_chat_recovery``."""

    reason: RecoveryReason
    message: str = ""
    """The lost attempt's failure, as the history has it (at most 500 characters)."""
    deaths: int = 0
    """The activity's worker deaths so far (``TurnPlan.crash_retries`` bounds them)."""


class ModelStepInput(Internal):
    turn: TurnRef
    step: int
    model: str
    attempt: int = 0
    """This attempt's number, counted by the workflow (1, 2, …); 0: Temporal's own count
    (turns recorded before the workflow counted attempts)."""
    failures: int = 0
    """Earlier attempts of this step that failed (not counting worker deaths)."""
    last_try: bool = False
    """A failure of this attempt ends the step (with ``attempt`` set)."""
    recovery: Recovery | None = None
    """Set when the attempt before this one was lost: this attempt is a recovery."""
    finish: FinishTurnInput | None = None
    """Set when the turn ends ``completed`` should this step call no tool: the activity then
    finishes the turn as ``finish_turn`` would, when no user code runs there
    (``StepSummary.result``); else (or on a worker that predates the field) the workflow
    runs ``finish_turn``. The recorded result decides, so a history either way replays."""


class ToolCallRef(Internal):
    tool_call_id: str
    tool_name: str
    timeout_s: float | None = None
    """The tool's own ``@tool(timeout_s=…)`` (None: not a tool of the worker's registry)."""
    retries: int = 0
    """The tool's ``@tool(retries=…)``."""


class StepSummary(Internal):
    """What the workflow learns of a model step: small, whatever the context size."""

    step: int
    outcome: Literal["ok", "context_overflow", "stopped"] = "ok"
    """``stopped``: ``on_chat_recovery`` returned ``"stop"``, or the step found its request's
    cancel mark (``streams.cancel``); the turn ends ``aborted``."""
    finish_reason: str = "stop"
    tool_calls: list[ToolCallRef] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    text_chars: int = 0
    error: str | None = None
    result: TurnResult | None = None
    """The turn's result when the step finished the turn too (``ModelStepInput.finish``)."""


class ToolCallInput(Internal):
    turn: TurnRef
    step: int
    tool_call_id: str
    tool_name: str
    resolution: ToolResolution | None = None
    attempt: int = 0
    """This attempt's number, counted by the workflow (1, 2, …); 0: Temporal's own count."""
    failures: int = 0
    """Earlier attempts of this call that failed (not counting worker deaths)."""
    recovery: Recovery | None = None
    """Set when the attempt before this one was lost: this attempt is a recovery."""


ToolCallOutcome = Literal[
    "ran", "blocked", "substituted", "denied", "unavailable", "invalid", "interrupted", "hook_error"
]
"""What became of one tool call, beside ``is_error`` (what the model is told):

* ``ran``: the tool ran (or, for a client tool, the client answered), whatever it returned;
* ``blocked``: ``before_tool_call`` returned ``block(reason)``; the reason is the output;
* ``substituted``: ``before_tool_call`` returned ``substitute(output)``; that is the output;
* ``denied``: the user refused a call that needed approval;
* ``unavailable``: the model called a tool it was not offered (or that does not exist);
* ``invalid``: the input did not validate (the model's, or the one ``before_tool_call`` gave);
* ``interrupted``: an attempt of a tool that is not ``retry_safe`` was cut off before its
  result was recorded, so it was not run again;
* ``hook_error``: ``before_tool_call`` raised; the tool did not run.
"""


class ToolOutcome(Internal):
    tool_call_id: str
    tool_name: str
    success: bool
    blocked: bool = False
    error: str | None = None
    pending: Literal["client", "approval", "agent"] | None = None
    """The call waits for the client (its result, or an approval), or (``agent``) for the
    sub-agent the workflow runs for it."""
    task: str | None = None
    """``agent``: the sub-agent's task, its first user message (at most
    :data:`MAX_AGENT_TASK_BYTES`)."""
    stopped: bool = False
    """``on_chat_recovery`` returned ``"stop"`` before the call ran again: the turn ends
    ``aborted``, the call without a result."""


class RelayAgentInput(Internal):
    """``relay_agent``: copy a sub-agent's live stream onto its parent's, under the call."""

    turn: TurnRef
    """The parent's turn."""
    step: int
    tool_call_id: str
    tool_name: str
    child_turn_id: str
    """The child turn's stream id (its workflow id)."""


class FinishTurnInput(Internal):
    turn: TurnRef
    steps: int
    status: TurnStatus = "completed"
    continuation: bool = False
    usage: Usage = Field(default_factory=Usage)
    error: ErrorInfo | None = None
    auto_continue: bool = False
    """The turn's client tool results arrived: the conversation continues it in the next
    turn, which the turn's ``turn-finish`` stream event names (``continued_by_turn``)."""


class FailTurnInput(Internal):
    turn: TurnRef
    steps: int
    error: ErrorInfo
    continuation: bool = False


class CompactInput(Internal):
    turn: TurnRef
    model: str
    reason: Literal["overflow", "proactive"] = "overflow"
    number: int = 0
    """Compactions of this turn so far (keys the stored summary)."""


class CompactResult(Internal):
    shortened: bool
    tokens_before: int
    tokens_after: int
    folded: int = 0
    reason: str = ""


class ChatResponseInput(Internal):
    result: TurnResult
    agent: str | None = None
    """A sub-agent's turn: its agent's ``on_chat_response`` runs (``TurnRef.agent``)."""
