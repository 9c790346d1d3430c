"""Concurrent turns through ONE worker process, per Celery pool: completed, wall ÷ provider time, RSS, turns per GiB.

An LLM turn spends its time waiting on the provider. Here each provider call streams its answer over
`PROVIDER_SECONDS` (text deltas paced through the whole call, so live text is written all along), through the
real `anthropic` SDK against the fake Messages API, with every safeguard on (journal, ledger, lease and
heartbeat, events, repair, live deltas: nothing is switched off for the benchmark). One worker per pool:

- `threads` and `gevent` at `-c 500`, sent 500 turns on 500 chats at once (gevent only if it is installed);
- `prefork` at a concurrency a machine can hold (a process per turn in flight), sent two waves of turns.

Measured per pool: turns completed, wall time from the first send to the last completion ÷ the provider's time,
peak RSS of the worker's whole process tree (sampled every 0.1 s), and turns in flight per GiB of that peak.
The goal (issue #16, point 5): 500 turns through one process, all complete, in ≤ 2x the provider's time, within
1 GiB. On `threads`, issue #41's figure beside it: the naive loop's worker on the same Redis, fake and pool, a batch
of each side per round over `ROUNDS` rounds (the order alternating), and the median of the rounds' ratios: one
batch a side swung 1.00-1.41 between runs on the same machine.

    python -m bench.concurrency                 # every pool
    python -m bench.concurrency threads 200     # one pool, one concurrency
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psutil

from bench._common import Row, Stack, fmt, judge, print_rows
from bench.memory import tree_memory
from tests.support.fake_anthropic import Reply

PROVIDER_SECONDS = 3.0
PARTS = 6  # text deltas per answer
# message_start, ping, content_block_start, the deltas, content_block_stop, message_delta, message_stop: the fake
# sleeps `pace` after each event.
EVENTS = PARTS + 6
TURNS = 500
PREFORK_CONCURRENCY = 16
WARM = 16  # warm-up turns sent at once (enough to reach every prefork child)
ROUNDS = 5  # threads: Baton's batch and the naive loop's, this many times each
GIB = 1024.0  # MiB


def answer(body: dict[str, Any], index: int) -> Reply:
    """Every call: a text answer streamed over the provider's time."""
    return Reply(
        content=[{"type": "text", "text": "a considered answer, streamed slowly " * 3}],
        pace=PROVIDER_SECONDS / EVENTS,
        parts=PARTS,
    )


@dataclass(frozen=True)
class Result:
    pool: str
    concurrency: int
    turns: int
    completed: int
    wall_s: float
    send_s: float
    peak_rss_mib: float
    peak_pss_mib: float
    idle_rss_mib: float
    processes: int
    rounds: list[tuple[float, float]] = field(default_factory=list)  # (Baton's wall, the naive loop's) per round

    @property
    def ratio(self) -> float:
        return self.wall_s / PROVIDER_SECONDS

    @property
    def turns_per_gib(self) -> float:
        """Turns in flight at once per GiB of the worker tree's peak RSS."""
        return min(self.concurrency, self.turns) / (self.peak_rss_mib / GIB)


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of a process and its descendants."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        times = proc.cpu_times()
        total += times.user + times.system
    return total


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


class PeakRss:
    """Samples a process tree's RSS in the background; `peak` is the highest seen."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval = pid, interval
        self.peak = self.peak_pss = 0.0
        self.processes = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._halt.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                rss, pss, procs = tree_memory(self.pid)
            except Exception:  # a child exiting between listing and reading
                continue
            if rss > self.peak:
                self.peak, self.processes = rss, procs
            self.peak_pss = max(self.peak_pss, pss)
            self._halt.wait(self.interval)


def measure(pool: str, concurrency: int, turns: int, *, beside: int = 0, **worker_env: str) -> Result:
    """Baton's batch of `turns` on one worker of `pool`; with `beside`, that many rounds against the naive loop too
    (`Result.rounds`): its worker on the same Redis and fake (`bench.naive_app`, streaming, the same pool), a batch of
    each per round, the order alternating, so a machine whose speed drifts weighs on both sides alike."""
    with Stack(f"conc-{pool}", handler=answer) as stack:
        worker = stack.worker("c1", concurrency=concurrency, pool=pool, **worker_env)
        assert worker.proc is not None
        client = stack.client()
        naive = _NaiveSide(stack, pool, concurrency, worker.proc.pid) if beside else None
        stamp = int(time.time())
        # Warm up (imports, the provider's client, connections) every prefork child, or the one process.
        warm_refs = [client.send_message(f"warm-{stamp}-{i}", "warm up") for i in range(min(concurrency, WARM))]
        for ref in warm_refs:
            warm = client.wait(ref, timeout=60)
            if warm.status != "completed":
                raise RuntimeError(f"{pool}: a warm-up turn ended {warm.status}: {warm.failure}")
        if naive is not None:
            naive.batch(f"warm-{stamp}", min(concurrency, WARM), report=False)
        idle, _, _ = tree_memory(worker.proc.pid)
        assert stack.redis_server is not None and stack.redis_server.proc is not None
        redis_pid = stack.redis_server.proc.pid
        cpu0, redis0, bench0 = tree_cpu(worker.proc.pid), tree_cpu(redis_pid), _own_cpu()
        with PeakRss(worker.proc.pid) as peak:
            wall, send_s, ended, failures = _baton_batch(client, f"c-{stamp}", turns, concurrency)
        cpu, redis_cpu, bench_cpu = tree_cpu(worker.proc.pid) - cpu0, tree_cpu(redis_pid) - redis0, _own_cpu() - bench0
        print(f"  {pool}: CPU over the batch: worker {fmt(cpu)} s ({fmt(cpu / turns * 1000)} ms a turn), redis-server "
              f"{fmt(redis_cpu)} s, this process (fake API + client) {fmt(bench_cpu)} s", flush=True)
        for failure in sorted(set(failures))[:5]:
            print(f"  {pool}: not completed: {failure}", flush=True)
        errors = [line for line in worker.log().splitlines() if "Error" in line or "Traceback" in line]
        if errors:
            print(f"  {pool}: {len(errors)} error lines in the worker's log, e.g. {errors[0][:300]}", flush=True)
        completed = sum(1 for status, _ in ended if status == "completed")
        done = sorted(ended_at for _, ended_at in ended)
        print(f"  {pool}: turns done after {fmt(done[0])} s (first), {fmt(done[len(done) // 2])} s (median), "
              f"{fmt(done[-1])} s (last) from the first send", flush=True)
        rounds: list[tuple[float, float]] = []
        if naive is not None:
            rounds.append((wall, naive.batch(f"n0-{stamp}", turns)))
            for r in range(1, beside):
                if r % 2:  # the naive side first in odd rounds
                    naive_s = naive.batch(f"n{r}-{stamp}", turns)
                    baton_s = _baton_batch(client, f"c{r}-{stamp}", turns, concurrency)[0]
                else:
                    baton_s = _baton_batch(client, f"c{r}-{stamp}", turns, concurrency)[0]
                    naive_s = naive.batch(f"n{r}-{stamp}", turns)
                rounds.append((baton_s, naive_s))
            naive.close()
        return Result(pool, concurrency, turns, completed, wall, send_s, peak.peak, peak.peak_pss, idle, peak.processes,
                      rounds)


def _baton_batch(client: Any, prefix: str, turns: int, concurrency: int) -> tuple[float, float, list[Any], list[str]]:
    """`turns` turns on distinct chats sent at once and all awaited: the wall and send seconds, each turn's (status,
    seconds from the first send to its end), and what did not complete."""
    failures: list[str] = []
    started = time.perf_counter()
    refs = [client.send_message(f"{prefix}-{i}", f"turn {i}") for i in range(turns)]
    send_s = time.perf_counter() - started

    def wait(ref: Any) -> tuple[str, float]:
        result = client.wait(ref, timeout=60 + 4 * PROVIDER_SECONDS * turns / concurrency)
        if result.status != "completed":
            failures.append(f"{result.status}: {result.failure}")
        return result.status, time.perf_counter() - started

    with ThreadPoolExecutor(64) as waiters:
        ended = list(waiters.map(wait, refs))
    return max(at for _, at in ended), send_s, ended, failures


class _NaiveSide:
    """The naive loop's worker beside Baton's (`bench.naive_loop.naive_beside`), on `pool`."""

    def __init__(self, stack: Stack, pool: str, concurrency: int, baton_pid: int) -> None:
        from bench.naive_loop import naive_beside

        self.app, self.queue, self.worker = naive_beside(stack, concurrency, pool=pool)
        assert stack.redis_server is not None and stack.redis_server.proc is not None
        self.pool, self.concurrency = pool, concurrency
        self.redis_pid, self.baton_pid = stack.redis_server.proc.pid, baton_pid

    def batch(self, prefix: str, turns: int, *, report: bool = True) -> float:
        """Wall seconds for `turns` naive turns sent at once and all awaited (with `report`, their CPU printed)."""
        assert self.worker.proc is not None
        cpu0, redis0, bench0 = tree_cpu(self.worker.proc.pid), tree_cpu(self.redis_pid), _own_cpu()
        idle0 = tree_cpu(self.baton_pid)
        started = time.perf_counter()
        sent = [self.app.send_task("naive.turn", args=[f"{prefix}-{i}", f"turn {i}"], queue=self.queue)
                for i in range(turns)]
        send_s = time.perf_counter() - started
        with ThreadPoolExecutor(64) as waiters:
            list(waiters.map(lambda r: r.get(timeout=60 + 4 * PROVIDER_SECONDS * turns / self.concurrency), sent))
        wall = time.perf_counter() - started
        if report:
            cpu = tree_cpu(self.worker.proc.pid) - cpu0
            print(f"  naive {self.pool}: {turns} turns in {fmt(wall)} s; CPU over the batch: worker {fmt(cpu)} s "
                  f"({fmt(cpu / turns * 1000)} ms a turn), redis-server {fmt(tree_cpu(self.redis_pid) - redis0)} s, "
                  f"this process (fake API + client) {fmt(_own_cpu() - bench0)} s, Baton's idle worker "
                  f"{fmt(tree_cpu(self.baton_pid) - idle0)} s; sending took {fmt(send_s)} s", flush=True)
        return wall

    def close(self) -> None:
        self.app.close()


def pools() -> list[tuple[str, int, int]]:
    plan = [("threads", TURNS, TURNS)]
    if importlib.util.find_spec("gevent") is not None:
        plan.append(("gevent", TURNS, TURNS))
    plan.append(("prefork", PREFORK_CONCURRENCY, 2 * PREFORK_CONCURRENCY))
    return plan


def rows(results: list[Result]) -> list[Row]:
    out: list[Row] = []
    for r in results:
        at = f"{r.pool} -c {r.concurrency}, {r.turns} turns of {fmt(PROVIDER_SECONDS)} s"
        big = r.concurrency >= TURNS
        out += [
            Row(f"{at}: completed", r.completed, "turns", f"= {r.turns}",
                "meets" if r.completed == r.turns else "misses"),
            Row(f"{at}: wall ÷ provider time", r.ratio, "x", "≤ 2" if big else "—",
                judge(r.ratio, at_most=2) if big else f"info ({r.turns // r.concurrency} waves)"),
            Row(f"{at}: peak RSS, worker tree ({r.processes} processes)", r.peak_rss_mib, "MiB",
                "≤ 1024" if big else "—", judge(r.peak_rss_mib, at_most=1024) if big else "info"),
            Row(f"{at}: turns in flight per GiB of peak RSS", r.turns_per_gib, "turns/GiB", "—",
                f"info (per GiB of PSS: {fmt(min(r.concurrency, r.turns) / (r.peak_pss_mib / GIB))})"),
        ]
    return out


def main(only: str | None = None, concurrency: int | None = None) -> list[Row]:
    results = []
    beside: list[Row] = []
    for pool, c, turns in pools():
        if only is not None and pool != only:
            continue
        c = concurrency or c
        turns = c if concurrency and pool != "prefork" else (2 * c if concurrency else turns)
        # Issue #41's figure, on threads: the same turns through the naive loop on the same pool, in rounds.
        r = measure(pool, c, turns, beside=ROUNDS if pool == "threads" else 0)
        if r.rounds:
            ratios = [b / n for b, n in r.rounds]
            ratio = statistics.median(ratios)
            print(f"  {pool} -c {c}: Baton ÷ naive per round {', '.join(fmt(x) for x in ratios)} (Baton "
                  f"{', '.join(fmt(b) for b, _ in r.rounds)} s; naive {', '.join(fmt(n) for _, n in r.rounds)} s)",
                  flush=True)
            beside.append(Row(f"{pool} -c {c}, {turns} turns of {fmt(PROVIDER_SECONDS)} s: wall ÷ the naive loop's on "
                              f"the same pool (median of {len(ratios)} rounds)", ratio, "x", "≤ 1.0",
                              f"{judge(ratio, at_most=1.0)} (rounds {fmt(min(ratios))} to {fmt(max(ratios))}; naive "
                              f"{fmt(statistics.median(n for _, n in r.rounds) / PROVIDER_SECONDS)}x the provider's "
                              "time)"))
        print(f"  {pool} -c {c}: {r.completed}/{r.turns} completed in {fmt(r.wall_s)} s "
              f"({fmt(r.ratio)}x the provider's {fmt(PROVIDER_SECONDS)} s; sending took {fmt(r.send_s)} s), "
              f"RSS idle {fmt(r.idle_rss_mib)} MiB, peak {fmt(r.peak_rss_mib)} MiB over {r.processes} processes "
              f"(PSS {fmt(r.peak_pss_mib)} MiB), "
              f"{fmt(r.turns_per_gib)} turns/GiB", flush=True)
        results.append(r)
    return [*rows(results), *beside]


if __name__ == "__main__":
    args = sys.argv[1:]
    print_rows(main(args[0] if args else None, int(args[1]) if len(args) > 1 else None))
