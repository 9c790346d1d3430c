"""Which definition a unit runs with when an execution starts: a pure decision (no Redis), unit-tested.

A unit keeps the version it started with (pinned: a deploy changes nothing in the middle of a run, and its
prompt cache stays warm); an agent declared `upgrade=True` moves its units to the worker's version instead,
and says so. A worker that does not serve the unit's agent at all hands it back (a rolling deploy that adds an
agent: the old workers meet its units first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent.agents.resolved import Resolved

UPGRADED_NOTICE = "The agent was updated ({before} → {after}); continuing with the new version."


@dataclass(frozen=True)
class Choice:
    """The definition an execution runs (None: this worker cannot run the unit), and the version it moved from
    when it upgraded the unit (None: it did not)."""

    agent: Resolved | None
    upgraded_from: str | None = None

    @property
    def notice(self) -> str | None:
        """The contract's words for an upgrade, versions named."""
        if self.agent is None or self.upgraded_from is None:
            return None
        return UPGRADED_NOTICE.format(before=self.upgraded_from, after=self.agent.version)


def choose(recorded_version: str | None, mine: Resolved | None, recorded: Callable[[str], Resolved | None]) -> Choice:
    """The definition for a unit that recorded `recorded_version` (None: it has not started), on a worker whose own
    definition of its agent is `mine` (None: it serves no such agent). `recorded(version)` reads a recorded
    definition back (asked only when the versions differ and the agent does not upgrade)."""
    if mine is None:
        return Choice(None)
    if recorded_version is None or recorded_version == mine.version:
        return Choice(mine)
    if mine.upgrade:
        return Choice(mine, upgraded_from=recorded_version)
    pinned = recorded(recorded_version)
    if pinned is None:
        # The recorded definition is gone from the store (it was flushed): nothing to pin to; the worker's own, said.
        return Choice(mine, upgraded_from=recorded_version)
    return Choice(pinned)


def chosen_model(agent: Resolved, requested: str | None) -> str:
    """The model a unit asks for: the one it requested (or recorded) when its agent allows it, else the agent's."""
    return requested if requested is not None and requested in agent.models else agent.model
