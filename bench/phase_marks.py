"""Marks in a benchmark worker's pool child: when each step of a turn began and ended (`bench.turn_phases`).

Loaded by the worker as its tools (`BATON_TOOLS=bench.phase_marks:TOOLS`, the same `peek` as `bench.tools`), it
wraps the execution's steps, the provider call and redis-py's send and read with a clock read on entry and exit,
and appends each execution's marks as one line to the file `BATON_BENCH_PHASES` names. A mark costs ~1 µs; the
figures are wall time on the unit's thread (a wait for Redis or the provider included), not CPU. With
`BATON_BENCH_ARRIVALS` it also marks, by the wall clock (`bench.arrivals`), each task's arrival in the worker's main
process and its start in the pool child, and `written` when the settle's write returns (what wakes a waiting client).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

import redis.connection

import agent.loop.model_step
import agent.loop.run
import agent.provider.anthropic_provider
import agent.provider.rate_gate
import tasks.execution.flow
import tasks.execution.settling
import tasks.store.fenced
import tasks.store.journal
from bench import arrivals
from bench.tools import TOOLS

__all__ = ["TOOLS"]

_marks: list[tuple[str, float]] = []


def _wrapped(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def marked(*args: Any, **kwargs: Any) -> Any:
        _marks.append((name + "<", time.perf_counter()))
        try:
            return fn(*args, **kwargs)
        finally:
            _marks.append((name + ">", time.perf_counter()))

    return marked


def _mark(owner: Any, attribute: str, name: str) -> None:
    setattr(owner, attribute, _wrapped(name, getattr(owner, attribute)))


def _written(commit: Callable[..., Any]) -> Callable[..., Any]:
    """The settle's write, marked once it returns: the first commit of an execution after `settle<`."""

    @functools.wraps(commit)
    def marked(*args: Any, **kwargs: Any) -> Any:
        reply = commit(*args, **kwargs)
        if any(name == "settle<" for name, _ in _marks) and not any(name == "written" for name, _ in _marks):
            arrivals.mark("written")
            _marks.append(("written", time.perf_counter()))
        return reply

    return marked


def _execution(run: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(run)
    def marked(*args: Any, **kwargs: Any) -> Any:
        _marks.clear()
        _marks.append(("run<", time.perf_counter()))
        try:
            return run(*args, **kwargs)
        finally:
            _marks.append(("run>", time.perf_counter()))
            start = _marks[0][1]
            with open(os.environ["BATON_BENCH_PHASES"], "a") as out:
                out.write(" ".join(f"{name}={(at - start) * 1000:.4f}" for name, at in _marks) + "\n")

    return marked


if os.environ.get("BATON_BENCH_PHASES"):
    flow, settling = tasks.execution.flow, tasks.execution.settling
    _mark(flow.Execution, "_take", "take")
    _mark(flow, "run_loop", "loop")
    _mark(agent.loop.model_step, "plan_request", "plan")
    _mark(agent.provider.rate_gate.LimitedProvider, "_admit", "preflight")
    _mark(agent.provider.anthropic_provider.AnthropicProvider, "stream", "provider")
    _mark(tasks.store.journal.RedisJournal, "record", "journal")
    _mark(agent.loop.run, "run_round", "tools")
    _mark(settling.Settling, "_settle", "settle")
    _mark(tasks.store.fenced.Fence, "commit", "commit")
    _mark(redis.connection.AbstractConnection, "send_packed_command", "send")
    _mark(redis.connection.AbstractConnection, "read_response", "read")
    flow.Execution.run = _execution(flow.Execution.run)  # type: ignore[method-assign]
    tasks.store.fenced.Fence.commit = _written(tasks.store.fenced.Fence.commit)  # type: ignore[method-assign]
    arrivals.track()
