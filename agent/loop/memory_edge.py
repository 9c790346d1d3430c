"""The in-memory `Edge`: the stub beside the Redis journal, for unit tests and the pure demo paths."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.loop.edge import EventDraft
from agent.messages.media import encode


@dataclass
class MemoryEdge:
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[EventDraft] = field(default_factory=list)
    writes: int = 0
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)  # tool_use_id -> a person's decision
    files: dict[str, bytes] = field(default_factory=dict)  # what `keep_files` stored, by SHA-256

    def recorded(self, step_id: str) -> dict[str, Any] | None:
        return self.steps.get(step_id)

    def record(
        self, step_id: str, record: dict[str, Any], events: list[EventDraft], *, last: bool = False,
        reads_next: bool = False, writes_next: bool = False,
    ) -> None:
        self.steps[step_id] = record
        self.events.extend(events)
        self.writes += 1

    def round_done(self) -> None:
        """Nothing to start ahead in memory."""

    def keep_files(self, files: Mapping[str, bytes]) -> None:
        self.files.update(files)

    def base64(self, sha256: str) -> str | None:
        """The edge as the `FileSource` of a unit test's requests."""
        data = self.files.get(sha256)
        return None if data is None else encode(data)

    def emit(self, events: list[EventDraft]) -> None:
        self.events.extend(events)

    def decision(self, tool_use_id: str) -> dict[str, Any] | None:
        return self.decisions.get(tool_use_id)

    def types(self) -> list[str]:
        return [kind for kind, _ in self.events]
