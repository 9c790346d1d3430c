"""The `invoke_agent AGENT` span of one execution of a unit, current while the loop runs.

`traced(...)` is what the flow wraps an execution in: the shared no-op when this process does not trace (no
OpenTelemetry import, no allocation), else a span that continues the sender's context (the Celery message's
`traceparent`, attached by tasks/telemetry/celery_signals.py; else the one the unit's first execution continued,
kept in its record), links to the execution before it, and says at its end why the next one will run.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from tasks.telemetry import switch

if TYPE_CHECKING:
    import redis

    from tasks.execution.settling import Outcome, Unit
    from tasks.store.fenced import Fence
    from tasks.store.records import UnitRecord


class ExecutionSpan(Protocol):
    def __enter__(self) -> ExecutionSpan: ...

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None: ...

    def ended(self, outcome: Outcome, rec: UnitRecord) -> Outcome:
        """The execution ended with `outcome` (`rec` as it ran it): recorded, and returned."""
        ...


class _NoSpan:
    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        return None

    def ended(self, outcome: Outcome, rec: UnitRecord) -> Outcome:
        return outcome


_NO_SPAN = _NoSpan()


def traced(
    client: redis.Redis, fence: Fence, unit: Unit, rec: UnitRecord, record: dict[bytes | str, bytes | str]
) -> ExecutionSpan:
    """The span of the execution about to run `unit` (`record`: its record's hash as taken, for the `otel` mark;
    `fence`: the execution's, whose next write carries the mark)."""
    if not switch.on():
        return _NO_SPAN
    from tasks.telemetry.execution_span import OtelExecution

    return OtelExecution(client, fence, unit, rec, record, time.time())
