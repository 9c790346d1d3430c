"""What a budget reservation and its settlement add to one provider attempt: time and Redis commands.

In-process against a real redis-server (embedded): the loop's own `Meter` (agent/loop/spend.py) wraps an attempt
that does nothing, so what is timed is the reservation and the settlement alone, with the worker's `RedisSpend`
(tasks/store/budgets.py) on a chat turn's four scopes (user, chat, agent, all). Three arms, interleaved:

- no budgets at all in the loop (`spend` None): the baseline, no command;
- budgets on, none set for the unit's scopes: the reservation script finds nothing to hold (one command);
- a budget on each of the four scopes: reserve and settle (two commands).

Commands are counted twice: the round trips this process sends (a counting client) and what Redis ran
(`INFO commandstats`, the commands inside the scripts included). PING's round trip is the yardstick.

Run: `python -m bench.budgets`.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agent.loop.spend import Charge, Meter, Spend
from agent.provider.base import TokenUsage
from agent.provider.price import Price
from bench._common import Row, command_counts, delta, judge, median, print_rows
from bench.redis_roundtrips import CountingRedis
from tasks.demo.embedded_redis import EmbeddedRedis
from tasks.store import budgets
from tasks.store.budget_rules import unit_scopes

N = 2000
PRICE = Price(input=3.0, output=15.0, cache_write=3.75, cache_read=0.30)
WORST = Charge(tokens=40_000, nanos=150_000_000)
USAGE = TokenUsage(input_tokens=3000, output_tokens=400, cache_read_input_tokens=20_000)


def attempt(meter: Meter | None) -> None:
    """One attempt that costs nothing but its metering."""
    if meter is None:
        return
    with meter.attempt() as metered:
        metered.answered(USAGE)


def timed(n: int, meter: Callable[[], Meter | None]) -> list[float]:
    out = []
    for _ in range(n):
        m = meter()
        started = time.perf_counter()
        attempt(m)
        out.append((time.perf_counter() - started) * 1e6)
    return out


def counted(r: CountingRedis, n: int, meter: Callable[[], Meter | None]) -> tuple[float, float]:
    """(round trips this process sent, commands Redis ran) per attempt."""
    before, sent = command_counts(r), r.sent
    for _ in range(n):
        attempt(meter())
    ran = delta(command_counts(r), before)
    return (r.sent - sent - 1) / n, sum(ran.values()) / n  # the `INFO` of `command_counts` is not an attempt's


def main(n: int = N) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="baton-bench-budgets-") as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis").start()
        try:
            return _measure(server.url, n)
        finally:
            server.stop()


def _measure(url: str, n: int) -> list[Row]:
    r = CountingRedis.from_url(url)
    # A store with no budget at all: the same server, another db (the URL's db would win over a `db=` argument).
    bare = CountingRedis.from_url(url.rsplit("/", 1)[0] + "/1")
    scopes = unit_scopes("chat:bench", "bench-user", "bench-agent")
    for scope in scopes:
        budgets.set_budget(r, scope, 1e6, 10**15, "month")
    free: Spend = budgets.RedisSpend(bare, "chat:bench", scopes, "lease")
    held: Spend = budgets.RedisSpend(r, "chat:bench", scopes, "lease")
    arms: dict[str, Callable[[], Meter | None]] = {
        "none": lambda: None,
        "free": lambda: Meter(free, WORST, PRICE),
        "held": lambda: Meter(held, WORST, PRICE),
    }
    for make in arms.values():
        timed(50, make)  # the scripts loaded, the connection warm
    times: dict[str, list[float]] = {name: [] for name in arms}
    ping: list[float] = []
    for _ in range(n // 100):  # interleaved, so a slow moment of the machine falls on every arm alike
        for name, make in arms.items():
            times[name] += timed(100, make)
        for _ in range(100):
            started = time.perf_counter()
            r.ping()
            ping.append((time.perf_counter() - started) * 1e6)
    free_trips, free_ran = counted(bare, 500, arms["free"])
    r.config_resetstat()
    held_trips, held_ran = counted(r, 500, arms["held"])
    script_us = float(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])
    answer = budgets.read_budget(r, scopes[0])
    assert answer is not None and answer["reserved_tokens"] == 0, answer
    base = median(times["none"])
    return [
        Row("PING round trip (median)", median(ping), "us", "yardstick", "info"),
        Row("attempt metering, no budget applies (median)", median(times["free"]) - base, "us", "", "info"),
        Row("attempt metering, 4 budgets held (median)", median(times["held"]) - base, "us", "< 500 us",
            judge(median(times["held"]) - base, at_most=500)),
        Row("  p99, 4 budgets held", sorted(times["held"])[int(len(times["held"]) * 0.99)], "us", "", "info"),
        Row("round trips an attempt, no budget applies", free_trips, "commands", "", "info"),
        Row("round trips an attempt, 4 budgets held", held_trips, "commands", "<= 2", judge(held_trips, at_most=2)),
        Row("commands Redis ran an attempt, no budget applies", free_ran, "commands", "", "info"),
        Row("commands Redis ran an attempt, 4 budgets held", held_ran, "commands", "", "info"),
        Row("Redis time per script (reserve or settle), 4 budgets held", script_us, "us", "", "info"),
    ]


if __name__ == "__main__":
    print_rows(main())
