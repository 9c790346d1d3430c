"""Deploy drain and crash recovery, timed with real workers and a coding run held mid-stream.

One coding run, whose every provider request stalls mid-stream (the fake server holds the stream
open), is handed along a chain of workers:

Each successor is warmed with one chat turn first (see `warm_successor`).

- SIGTERM x 3: a fresh worker is started, then the one holding the run gets SIGTERM; timed from the
  signal to that worker's exit, and checked that the run was requeued (the next worker picks it up and
  the provider sees the request again).
- SIGKILL x 3 (`BATON_LEASE_TTL=3`): a fresh worker is started, then the holder's whole process group
  gets SIGKILL; timed from the kill to the provider seeing the run's request again, divided by the TTL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench._common import Row, Stack, fmt, judge, median, print_rows, wait_for
from tasks.client import Client
from tests.support.fake_anthropic import Fault, Reply, failing, text
from tests.support.fake_anthropic_sse import first_user_text
from tests.support.processes import Worker

TTL = 3.0
TRIALS = 3
STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking about it for a long time"))
WARM = "warm-up"


def make_handler(arrivals: list[float]) -> Callable[[dict[str, Any], int], Reply]:
    """The run's requests stall mid-stream (their arrival times noted); a warm-up turn is answered at once."""

    def handler(body: dict[str, Any], index: int) -> Reply:
        if WARM in first_user_text(body):
            return text("warm")
        arrivals.append(time.monotonic())
        return STALL

    return handler


def warm_successor(stack: Stack, client: Client, name: str) -> Worker:
    """Start the next worker and give its pool child one provider turn (the holder is busy, so it gets it).

    A fresh pool child imports the anthropic SDK on its first provider task (seconds on a loaded
    machine); a surviving worker in production has long done that, so the timings below exclude it.
    """
    worker = stack.worker(name, concurrency=1)
    result = client.wait(client.send_message(f"{WARM}-{name}", WARM), timeout=30)
    if result.status != "completed":
        raise RuntimeError(f"warm-up turn on {name} ended {result.status}: {result.failure}")
    return worker


def main(trials: int = TRIALS) -> list[Row]:
    env = {"BATON_LEASE_TTL": f"{TTL:g}", "BATON_MAX_INTERRUPTIONS": str(2 * trials + 2)}
    arrivals: list[float] = []
    with Stack("drain", handler=make_handler(arrivals), **env) as stack:
        holder = stack.worker("d0", concurrency=1)
        client = stack.client()
        workspace = stack.tmp / "workspace"
        workspace.mkdir()
        ref = client.start_run("think for a long time", workspace=workspace)
        wait_for(lambda: len(arrivals) >= 1, 30, what="the run's first provider request")

        drains: list[float] = []
        handovers: list[float] = []
        for i in range(1, trials + 1):
            successor = warm_successor(stack, client, f"d{i}")
            seen = len(arrivals)
            started = time.monotonic()
            holder.terminate()
            holder.wait_exit(timeout=30)
            drains.append(time.monotonic() - started)
            wait_for(lambda n=seen: len(arrivals) > n, 30, what=f"drain {i}: the run's request on the next worker")
            handovers.append(arrivals[seen] - started)
            holder = successor

        recoveries: list[float] = []
        for i in range(1, trials + 1):
            successor = warm_successor(stack, client, f"k{i}")
            seen = len(arrivals)
            started = time.monotonic()
            holder.kill9()
            wait_for(lambda n=seen: len(arrivals) > n, 30, what=f"kill {i}: the run's request on the next worker")
            recoveries.append(arrivals[seen] - started)
            holder = successor
        status = client.run_status(ref.run_id)

    print(f"  SIGTERM→exit {[fmt(d) for d in drains]} s; SIGTERM→resumed elsewhere {[fmt(h) for h in handovers]} s; "
          f"SIGKILL→resumed {[fmt(r) for r in recoveries]} s (TTL {TTL:g} s); run {status.status}, "
          f"interruptions {status.interruptions}", flush=True)
    drain_s = median(drains)
    ratio = median(recoveries) / TTL
    return [
        Row("SIGTERM → worker exited, run requeued (median of 3)", drain_s, "s", "≤ 5 s", judge(drain_s, at_most=5)),
        Row("SIGTERM → run resumed on the next worker (median of 3)", median(handovers), "s", "—", "info"),
        Row(f"SIGKILL → run resumed elsewhere ÷ lease TTL ({TTL:g} s, median of 3)", ratio, "x TTL", "≤ 1.5",
            judge(ratio, at_most=1.5)),
        Row("interruptions counted on the run", float(status.interruptions), "", str(2 * trials),
            "meets" if status.interruptions == 2 * trials else "misses"),
    ]


if __name__ == "__main__":
    print_rows(main())
