"""What the worker could not reach, said once in a line a person understands, and once more when it is back.

A worker started, or running, while its store is down keeps going: its sweeps retry every few seconds and
its tasks are published again for later (tasks/drivers/acting.py). A traceback every two seconds would bury
the one fact an operator needs, so an outage is told when it starts (naming the place, never a password) and
when it ends.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Outage:
    """The reachability of one place (`what`: "the store redis://host:6379/0"), as lines to log."""

    what: str
    retry_seconds: float
    since: float | None = None

    def failed(self, err: BaseException, now: float) -> str | None:
        """The line to log for a failed attempt: the first of an outage only."""
        if self.since is not None:
            return None
        self.since = now
        reason = str(err).strip() or type(err).__name__
        return (f"cannot reach {self.what} ({reason}); retrying every {self.retry_seconds:g} s, "
                "and going on once it is back")

    def reached(self, now: float) -> str | None:
        """The line to log for a successful attempt: the first after an outage only."""
        if self.since is None:
            return None
        lasted, self.since = now - self.since, None
        return f"reached {self.what} again after {lasted:.0f} s; going on"
