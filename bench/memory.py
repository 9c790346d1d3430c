"""Worker memory per concurrent run: the worker's process tree idle, then with runs held mid-stream.

One worker, concurrency 4, the real SDK against the fake server. Measured: the tree's RSS (and PSS,
which splits pages shared after fork fairly) right after start (cold), after 8 quick chat turns have
warmed every pool child (warm idle), and with 4 chat turns held mid-stream by a stalled fake stream
(busy). Per concurrent run = (busy - warm idle) / 4. The first turn on the fresh worker is timed too:
it includes whatever a pool child loads on its first provider task.
"""

from __future__ import annotations

import time
from typing import Any

import psutil

from bench._common import Row, Stack, fmt, median, print_rows, wait_for
from tests.support.fake_anthropic import Fault, Reply, failing, text
from tests.support.fake_anthropic_sse import first_user_text

CONCURRENCY = 4
WARM_TURNS = 8
MIB = 1024 * 1024
STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("held mid-stream"))


class Handler:
    """Warm-up turns are answered at once; `hold` turns stall mid-stream (their arrivals counted)."""

    def __init__(self) -> None:
        self.held = 0

    def __call__(self, body: dict[str, Any], index: int) -> Reply:
        if "hold" in first_user_text(body):
            self.held += 1
            return STALL
        return text("warm")


def tree_memory(pid: int) -> tuple[float, float, int]:
    """(RSS MiB, PSS MiB, process count) of a process and all its descendants."""
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    rss = pss = 0
    for proc in procs:
        info = proc.memory_full_info()
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
    return rss / MIB, pss / MIB, len(procs)


def settle(pid: int, seconds: float = 1.0) -> tuple[float, float, int]:
    """Median of a few samples over `seconds`, so one allocation burst does not decide the figure."""
    samples = []
    for _ in range(5):
        samples.append(tree_memory(pid))
        time.sleep(seconds / 5)
    return median(s[0] for s in samples), median(s[1] for s in samples), samples[-1][2]


def main(c: int = CONCURRENCY) -> list[Row]:
    handler = Handler()
    with Stack("memory", handler=handler) as stack:
        worker = stack.worker("m1", concurrency=c)
        assert worker.proc is not None
        pid = worker.proc.pid
        client = stack.client()
        stamp = int(time.time())
        cold_rss, cold_pss, procs = settle(pid)

        started = time.perf_counter()
        first = client.wait(client.send_message(f"warm-{stamp}-first", "warm up"), timeout=60)
        first_turn_s = time.perf_counter() - started
        refs = [client.send_message(f"warm-{stamp}-{i}", "warm up") for i in range(WARM_TURNS)]
        warm = [client.wait(ref, timeout=60) for ref in refs]
        if first.status != "completed" or any(r.status != "completed" for r in warm):
            raise RuntimeError("a warm-up turn did not complete")
        started = time.perf_counter()
        client.wait(client.send_message(f"warm-{stamp}-again", "warm up"), timeout=60)
        warm_turn_s = time.perf_counter() - started
        idle_rss, idle_pss, _ = settle(pid)

        for i in range(c):
            client.send_message(f"hold-{stamp}-{i}", "hold this")
        wait_for(lambda: handler.held >= c, 60, what=f"{c} turns held mid-stream")
        time.sleep(0.5)
        busy_rss, busy_pss, _ = settle(pid)

    per_run_rss = (busy_rss - idle_rss) / c
    per_run_pss = (busy_pss - idle_pss) / c
    print(f"  tree of {procs} processes: RSS cold {fmt(cold_rss)} MiB, warm idle {fmt(idle_rss)} MiB, busy "
          f"{fmt(busy_rss)} MiB; PSS cold {fmt(cold_pss)}, warm idle {fmt(idle_pss)}, busy {fmt(busy_pss)} MiB; "
          f"first turn on a fresh worker {fmt(first_turn_s)} s, a warm one {fmt(warm_turn_s * 1000)} ms", flush=True)
    return [
        Row(f"worker memory per concurrent run, RSS (busy - idle) / {c}", per_run_rss, "MiB", "—", "info"),
        Row(f"worker memory per concurrent run, PSS (busy - idle) / {c}", per_run_pss, "MiB", "—", "info"),
        Row(f"worker tree RSS idle, concurrency {c} (cold → warm)", idle_rss, "MiB",
            "—", f"info (cold {fmt(cold_rss)})"),
        Row(f"pool child warm-up, RSS per child (warm - cold idle) / {c}", (idle_rss - cold_rss) / c, "MiB", "—",
            "info"),
        Row("first chat turn on a fresh worker (real SDK, fake API)", first_turn_s, "s", "—",
            f"info (warm: {fmt(warm_turn_s * 1000)} ms)"),
    ]


if __name__ == "__main__":
    print_rows(main())
