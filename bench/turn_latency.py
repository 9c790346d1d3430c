"""Latency of one chat turn (scripted provider, one tool round) next to a bare `baton.ping`, same worker.

Sequential, one at a time, the two kinds alternating so machine noise hits both alike. A turn is timed
from `send_message` to `wait` returning its completed result (a fresh one-turn chat each time, so
history length does not grow across the sample); a ping from `send_task` to its result.
"""

from __future__ import annotations

import time

from bench._common import Row, Stack, fmt, judge, median, ping, print_rows

N = 40
WARMUP = 5
TEXT = 'tool:lookup{"key":"a"}'


def main(n: int = N) -> list[Row]:
    with Stack("latency") as stack:
        stack.worker("w1", concurrency=2)
        client = stack.client()
        prefix = f"lat{int(time.time())}"

        def turn(i: int) -> float:
            started = time.perf_counter()
            result = client.wait(client.send_message(f"{prefix}-{i}", TEXT), timeout=30)
            elapsed = time.perf_counter() - started
            if result.status != "completed":
                raise RuntimeError(f"turn {i} ended {result.status}: {result.failure}")
            return elapsed

        def one_ping() -> float:
            started = time.perf_counter()
            ping(client, stack.queue)
            return time.perf_counter() - started

        for i in range(WARMUP):
            turn(-1 - i)
            one_ping()
        turns: list[float] = []
        pings: list[float] = []
        for i in range(n):
            turns.append(turn(i))
            pings.append(one_ping())
    turn_ms, ping_ms = median(turns) * 1000, median(pings) * 1000
    ratio = turn_ms / ping_ms
    print(f"  turn p50 {fmt(turn_ms)} ms (min {fmt(min(turns) * 1000)}, max {fmt(max(turns) * 1000)}); "
          f"ping p50 {fmt(ping_ms)} ms (min {fmt(min(pings) * 1000)}, max {fmt(max(pings) * 1000)})", flush=True)
    return [
        Row("chat turn latency, 1 tool round (p50)", turn_ms, "ms", "—", "info"),
        Row("bare baton.ping latency (p50)", ping_ms, "ms", "—", "info"),
        Row("turn ÷ ping latency", ratio, "x", "≤ 2x", judge(ratio, at_most=2.0)),
    ]


if __name__ == "__main__":
    print_rows(main())
