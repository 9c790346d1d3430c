"""What a unit's record keeps for its traces, and the pure decisions made from it.

Each traced execution writes one field of the unit's record, `otel`: its own span's `traceparent`, the context it
continued (the request's), its number, and, when it ends, why the next one will run. The execution after it reads
that field with the record it takes: it links to the span before it, continues the same request's trace (a Celery
retry or defer does not carry the first message's headers), and names its cause. A field written only when tracing
is on, and read by nothing else: the record's model ignores it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from tasks.execution.settling import Outcome

FIELD = "otel"

Cause = Literal["first", "drain", "worker_lost", "approval", "retry", "rate_limited"]


@dataclass(frozen=True)
class Mark:
    """The `otel` field: the last execution's span, the trace it continued, its number, what comes next."""

    span: str  # W3C traceparent of the execution's `invoke_agent` span
    parent: str | None  # the traceparent the first execution continued (the sender's), if any
    execution: int
    next: Cause | None = None  # written when the execution ends; None: it never said (a lost worker)

    def dump(self) -> str:
        return json.dumps({"span": self.span, "parent": self.parent, "execution": self.execution, "next": self.next})

    @classmethod
    def load(cls, raw: bytes | str | None) -> Mark | None:
        """The field as read from the record (None when absent or not ours)."""
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            return cls(str(data["span"]), data.get("parent"), int(data["execution"]), data.get("next"))
        except (ValueError, TypeError, KeyError):
            return None


def cause_of(previous: Mark | None) -> Cause:
    """Why this execution runs: the first, or what the one before it said when it ended; one that never said
    (its worker died with it) was lost."""
    if previous is None:
        return "first"
    return previous.next or "worker_lost"


def next_cause(outcome: Outcome) -> Cause | None:
    """What brings the unit back after an execution that ended with `outcome` (None: nothing, it is finished or
    its message goes on as it is)."""
    if outcome.action == "requeue":
        return "drain"
    if outcome.action == "auto_resume":
        # Its reason starts with the failure class (settling.py): `provider_rate_limited: resuming ...`.
        return "rate_limited" if outcome.reason.partition(":")[0].endswith("rate_limited") else "retry"
    if outcome.action == "done" and outcome.reason == "waiting":
        return "approval"
    if outcome.action == "defer":
        return "retry"
    return None


def outcome_name(outcome: Outcome) -> str:
    """`baton.outcome`: the settled status (completed, failed, stopped, waiting), else what became of the message
    (interrupted, auto_resumed, deferred, dropped)."""
    if outcome.action == "done":
        return outcome.reason
    return {"requeue": "interrupted", "auto_resume": "auto_resumed", "defer": "deferred", "drop": "dropped"}[
        outcome.action
    ]


TERMINAL_OUTCOMES = ("completed", "failed", "stopped")
