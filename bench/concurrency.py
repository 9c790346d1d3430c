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
1 GiB.

    python -m bench.concurrency                 # every pool
    python -m bench.concurrency threads 200     # one pool, one concurrency
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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


def measure(pool: str, concurrency: int, turns: int, **worker_env: str) -> Result:
    with Stack(f"conc-{pool}", handler=answer) as stack:
        worker = stack.worker("c1", concurrency=concurrency, pool=pool, **worker_env)
        assert worker.proc is not None
        client = stack.client()
        stamp = int(time.time())
        # Warm up (imports, the provider's client, connections) every prefork child, or the one process.
        warm_refs = [client.send_message(f"warm-{stamp}-{i}", "warm up") for i in range(min(concurrency, WARM))]
        for ref in warm_refs:
            warm = client.wait(ref, timeout=60)
            if warm.status != "completed":
                raise RuntimeError(f"{pool}: a warm-up turn ended {warm.status}: {warm.failure}")
        idle, _, _ = tree_memory(worker.proc.pid)
        assert stack.redis_server is not None and stack.redis_server.proc is not None
        redis_pid = stack.redis_server.proc.pid
        cpu0, redis0, bench0 = tree_cpu(worker.proc.pid), tree_cpu(redis_pid), _own_cpu()
        failures: list[str] = []
        with PeakRss(worker.proc.pid) as peak:
            started = time.perf_counter()
            refs = [client.send_message(f"c-{stamp}-{i}", f"turn {i}") for i in range(turns)]
            send_s = time.perf_counter() - started

            def wait(ref: Any) -> tuple[str, float]:
                result = client.wait(ref, timeout=60 + 4 * PROVIDER_SECONDS * turns / concurrency)
                if result.status != "completed":
                    failures.append(f"{result.status}: {result.failure}")
                return result.status, time.perf_counter()

            with ThreadPoolExecutor(64) as waiters:
                ended = list(waiters.map(wait, refs))
        cpu, redis_cpu, bench_cpu = tree_cpu(worker.proc.pid) - cpu0, tree_cpu(redis_pid) - redis0, _own_cpu() - bench0
        print(f"  {pool}: CPU over the batch: worker {fmt(cpu)} s ({fmt(cpu / turns * 1000)} ms a turn), redis-server "
              f"{fmt(redis_cpu)} s, this process (fake API + client) {fmt(bench_cpu)} s", flush=True)
        for failure in sorted(set(failures))[:5]:
            print(f"  {pool}: not completed: {failure}", flush=True)
        errors = [line for line in worker.log().splitlines() if "Error" in line or "Traceback" in line]
        if errors:
            print(f"  {pool}: {len(errors)} error lines in the worker's log, e.g. {errors[0][:300]}", flush=True)
        completed = sum(1 for status, _ in ended if status == "completed")
        wall = max(at for _, at in ended) - started
        done = sorted(at - started for _, at in ended)
        print(f"  {pool}: turns done after {fmt(done[0])} s (first), {fmt(done[len(done) // 2])} s (median), "
              f"{fmt(done[-1])} s (last) from the first send", flush=True)
        return Result(pool, concurrency, turns, completed, wall, send_s, peak.peak, peak.peak_pss, idle, peak.processes)


def measure_naive(pool: str, concurrency: int, turns: int) -> float:
    """Wall seconds for `turns` of the naive loop (`bench.naive_app`, streaming, one worker on `pool` at
    `concurrency`) sent at once and all awaited: the same answers, the same fake, no safeguard."""
    from celery import Celery

    from bench.naive_loop import NaiveWorker

    with Stack(f"conc-naive-{pool}", handler=answer) as stack:
        queue = f"{stack.queue}-naive"
        worker = NaiveWorker("naive", {**stack.env, "NAIVE_REDIS_URL": stack.url, "NAIVE_QUEUE": queue,
                                       "NAIVE_STREAM": "1"}, stack.tmp, concurrency=concurrency, pool=pool)
        stack.workers.append(worker)
        worker.start(timeout=60)
        naive = Celery("naive-client", broker=stack.url, backend=stack.url)
        naive.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json")
        stamp = int(time.time())
        try:
            for result in [naive.send_task("naive.turn", args=[f"warm-{stamp}-{i}", "warm up"], queue=queue)
                           for i in range(min(concurrency, WARM))]:
                result.get(timeout=60)
            assert worker.proc is not None and stack.redis_server is not None and stack.redis_server.proc is not None
            pids = (worker.proc.pid, stack.redis_server.proc.pid)
            cpu0, redis0, bench0 = tree_cpu(pids[0]), tree_cpu(pids[1]), _own_cpu()
            started = time.perf_counter()
            sent = [naive.send_task("naive.turn", args=[f"n-{stamp}-{i}", f"turn {i}"], queue=queue)
                    for i in range(turns)]
            send_s = time.perf_counter() - started
            with ThreadPoolExecutor(64) as waiters:
                list(waiters.map(lambda r: r.get(timeout=60 + 4 * PROVIDER_SECONDS * turns / concurrency), sent))
            wall = time.perf_counter() - started
            cpu, redis_cpu, bench_cpu = tree_cpu(pids[0]) - cpu0, tree_cpu(pids[1]) - redis0, _own_cpu() - bench0
            print(f"  naive {pool}: CPU over the batch: worker {fmt(cpu)} s ({fmt(cpu / turns * 1000)} ms a turn), "
                  f"redis-server {fmt(redis_cpu)} s, this process (fake API + client) {fmt(bench_cpu)} s; sending "
                  f"took {fmt(send_s)} s", flush=True)
            return wall
        finally:
            naive.close()


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
        r = measure(pool, c, turns)
        if pool == "threads":
            # Issue #41's figure: the same turns through the naive loop on the same pool, one after the other.
            naive_s = measure_naive(pool, c, turns)
            print(f"  {pool} -c {c}: the naive loop's {turns} turns in {fmt(naive_s)} s; Baton ÷ naive "
                  f"{fmt(r.wall_s / naive_s)}x", flush=True)
            beside.append(Row(f"{pool} -c {c}, {turns} turns of {fmt(PROVIDER_SECONDS)} s: wall ÷ the naive loop's on "
                              "the same pool", r.wall_s / naive_s, "x", "≤ 1.0",
                              f"{judge(r.wall_s / naive_s, at_most=1.0)} (naive {fmt(naive_s / PROVIDER_SECONDS)}x "
                              "the provider's time)"))
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
