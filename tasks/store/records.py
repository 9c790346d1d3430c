"""Records kept in Redis hashes, and the results the client API returns (pydantic at the boundary)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from agent.messages.media import DocumentBlock, ImageBlock
from tasks.store.json_values import dumps_unicode
from tasks.store.replies import text

Status = Literal["queued", "running", "waiting", "completed", "failed", "stopped"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "stopped"})


class Failure(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    failure_class: str = Field(alias="class")
    retryable: bool
    message: str

    def public(self) -> dict[str, Any]:
        return {"class": self.failure_class, "retryable": self.retryable, "message": self.message}


class UsageOut(BaseModel):
    """`usage` of `baton send/status --json`: every attempt's tokens, discarded attempts included."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    attempts: int = 0
    discarded_attempts: int = 0
    reasoning_tokens: int | None = None  # where the API reported thinking (they are output tokens)
    cost_usd: float | None = None  # at the agent's price, discarded attempts included; absent without a price

    @model_serializer(mode="wrap")
    def _without_absent_reasoning(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for optional in ("reasoning_tokens", "cost_usd"):
            if out.get(optional) is None:
                out.pop(optional, None)
        return out


class UnitRecord(BaseModel):
    """A chat turn's or a run's durable record: one Redis hash, fields JSON-encoded."""

    kind: Literal["turn", "run"]
    owner_id: str
    unit_id: str
    status: Status = "queued"
    text: str = ""  # the user's message, or the run's goal
    # The files the user's message carries, by reference (their bytes are in the chat's store): they travel with
    # the text, and the start puts both in the transcript's user message.
    files: list[ImageBlock | DocumentBlock] = Field(default_factory=list)
    user: str | None = None  # who sent it or started the run; a chat is its first turn's user's (store/listing.py)
    workspace: str | None = None
    # The agent it runs: named at enqueue (None: the chat's, else the fleet's default), resolved when it starts
    # (name, version and model written then, and kept: agent/agents/resolved.py). `queue`: where its messages go.
    agent: str | None = None
    agent_version: str | None = None
    model: str | None = None
    queue: str | None = None
    agent_wait_since: float | None = None  # first handed back by a worker that does not serve its agent
    task_id: str = ""
    generation: int = 0
    auto_resumes: int = 0
    interruptions: int = 0
    waiting_reason: str | None = None
    # "interrupt": a new message sent with on_busy="interrupt" stops this turn (and its notice says so).
    stop_reason: Literal["interrupt"] | None = None
    approvals: list[dict[str, Any]] = Field(default_factory=list)  # calls waiting for a person: id, name, input
    resume_pending: bool = False
    history_len: int = -1  # transcript entries before this generation's own messages; -1: not started
    committed: int = 0  # this generation's messages already written to the transcript
    steps: int = 0
    reply: str | None = None
    resumed: bool = False
    failure: Failure | None = None
    usage: UsageOut = Field(default_factory=UsageOut)
    created_at: float = 0.0
    updated_at: float = 0.0

    def to_hash(self) -> dict[str, str]:
        # Non-ASCII as UTF-8, not `\\u` escapes: the text's JSON literal is then byte for byte what the message
        # encoder writes for it, so the take script can put it in the user's message (`store/take.py`).
        return {k: dumps_unicode(v) for k, v in self.model_dump(mode="json", by_alias=True).items()}

    @classmethod
    def from_hash(cls, raw: dict[bytes | str, bytes | str]) -> UnitRecord | None:
        if not raw:
            return None
        # Each field's value is JSON already: one document of them all, parsed and validated by pydantic at once,
        # takes a third of the time of a `json.loads` a field and a validation of the dict (the take reads a record
        # for every turn, and so does every wait).
        body = ",".join(f"{_quoted(text(k))}:{text(v)}" for k, v in raw.items())
        return cls.model_validate_json("{" + body + "}")

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def awaits_hand_off(self) -> bool:
        """Whether this turn, at its chat's head, waits for someone to publish it: not running, not parked for an
        approval (the decision that settles it enqueues it again). What a settle and the sweep both ask."""
        return self.status != "running" and not (self.status == "waiting" and self.waiting_reason == "approval")


_FIELD_NAMES = {name: json.dumps(name) for name in UnitRecord.model_fields}


def _quoted(field: str) -> str:
    """A record field's name as a JSON string (the model's own names are quoted once)."""
    return _FIELD_NAMES.get(field) or json.dumps(field)


class TurnRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    chat_id: str
    turn_id: str
    task_id: str


class TurnResult(BaseModel):
    """The fields of `baton send --json`."""

    chat_id: str
    turn_id: str
    task_id: str
    status: Status
    waiting_reason: str | None
    reply: str | None
    resumed: bool
    failure: dict[str, Any] | None
    usage: UsageOut
    agent: str | None = None
    agent_version: str | None = None
    model: str | None = None


class RunRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    task_id: str


class RunStatus(BaseModel):
    """The fields of `baton status --json` / `baton run --json`."""

    run_id: str
    status: Status
    interruptions: int
    waiting_reason: str | None
    steps: int
    reply: str | None
    failure: dict[str, Any] | None
    usage: UsageOut
    agent: str | None = None
    agent_version: str | None = None
    model: str | None = None


def turn_result(rec: UnitRecord) -> TurnResult:
    return TurnResult(
        chat_id=rec.owner_id.partition(":")[2],
        turn_id=rec.unit_id,
        task_id=rec.task_id,
        status=rec.status,
        waiting_reason=rec.waiting_reason,
        reply=rec.reply,
        resumed=rec.resumed,
        failure=rec.failure.public() if rec.failure else None,
        usage=rec.usage,
        agent=rec.agent,
        agent_version=rec.agent_version,
        model=rec.model,
    )


def run_status(rec: UnitRecord) -> RunStatus:
    return RunStatus(
        run_id=rec.unit_id,
        status=rec.status,
        interruptions=rec.interruptions,
        waiting_reason=rec.waiting_reason,
        steps=rec.steps,
        reply=rec.reply,
        failure=rec.failure.public() if rec.failure else None,
        usage=rec.usage,
        agent=rec.agent,
        agent_version=rec.agent_version,
        model=rec.model,
    )
