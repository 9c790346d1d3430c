"""Live text: where a model step's text (and its reasoning) goes while it streams, before the step is journaled.

Each step has a `message_id` that stays the same across its attempts (replays in one execution, and
executions after a drain or a lost worker); each attempt has a number that only grows. The rule
clients rely on: every piece of text of an attempt that is later discarded is published before the
event that discards it, so dropping discarded attempts leaves exactly the text the transcript keeps. Reasoning
(`reasoning.delta`) is live text of another kind, numbered and fenced the same way: a discarded attempt's
reasoning goes with its text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class StepStart:
    """Where a step's attempts stand when an execution starts streaming it."""

    attempts_before: int  # attempts earlier executions started; this execution numbers on from here
    orphaned: int | None = None  # an earlier attempt that streamed text no event discarded (its worker died)


class LiveText(Protocol):
    """The loop's side of live text (Redis in `tasks`; `NoLiveText` where nobody watches)."""

    def begin(self, message_id: str) -> StepStart:
        """A model step is about to stream (it is not journaled yet)."""
        ...

    def text(self, message_id: str, attempt: int, text: str) -> None:
        """A piece of text of one attempt, in order."""
        ...

    def reasoning(self, message_id: str, attempt: int, text: str) -> None:
        """A piece of the reasoning of one attempt, in order (before its text, as the model produces it)."""
        ...

    def discarded(self, message_id: str, attempt: int) -> None:
        """An attempt is void; the event saying so is about to be published."""
        ...

    def ended(self, message_id: str) -> None:
        """The step completed: its text is the answer that will be journaled."""
        ...


class NoLiveText:
    """Live text for nobody: unit tests and callers that only want the final answer."""

    def begin(self, message_id: str) -> StepStart:
        return StepStart(0)

    def text(self, message_id: str, attempt: int, text: str) -> None:
        return None

    def reasoning(self, message_id: str, attempt: int, text: str) -> None:
        return None

    def discarded(self, message_id: str, attempt: int) -> None:
        return None

    def ended(self, message_id: str) -> None:
        return None
