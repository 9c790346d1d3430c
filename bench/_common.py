"""Shared plumbing for the benchmarks: a private stack (Redis, fake API, workers), medians, result rows.

Every benchmark starts its own redis-server on a free loopback port, its own queue and workers, and
stops all of it on the way out (workers are SIGKILLed: nothing in a benchmark's Redis is worth
draining). Timings are printed, never asserted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import redis

from config.settings import Settings
from tasks.client import Client
from tasks.demo.embedded_redis import EmbeddedRedis
from tests.support.fake_anthropic import FakeMessagesServer, Handler
from tests.support.fake_openai import FakeChatServer
from tests.support.processes import REPO, Worker

FAKE_KEY = "sk-ant-bench-not-a-real-key"
FAKE_OPENAI_KEY = "sk-proj-bench-not-a-real-key"
TOOLS = "tests.support.counting_tools:TOOLS"


def cpu_seconds(pid: int) -> float:
    """CPU seconds process `pid` has run, all its threads, to the nanosecond: its POSIX CPU-time clock (the id Linux's
    `clock_getcpuclockid` gives, which Python does not wrap). What `/proc` says and psutil reads comes in 10 ms
    ticks, user and system apiece: a turn's fraction of a millisecond in Redis read as 0 or 10, and forty turns'
    sum was off by a millisecond a turn. Elsewhere (no such clock, or not allowed to read it) psutil's."""
    try:
        return time.clock_gettime((~pid << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    except OSError:
        return float(sum(psutil.Process(pid).cpu_times()[:2]))


@dataclass(frozen=True)
class Row:
    """One measured figure, as it appears in the results table."""

    name: str
    value: float | None
    unit: str
    goal: str
    verdict: str


def judge(value: float | None, *, at_most: float | None = None, at_least: float | None = None) -> str:
    """`meets` / `misses` against one bound; `info` when the figure has no goal."""
    if value is None:
        return "not measured"
    if at_most is not None:
        return "meets" if value <= at_most else "misses"
    if at_least is not None:
        return "meets" if value >= at_least else "misses"
    return "info"


def median(values: Iterable[float]) -> float:
    data = list(values)
    if not data:
        raise ValueError("median of nothing")
    return float(statistics.median(data))


def fmt(value: float | None) -> str:
    """A figure with about three significant digits (integers stay integers)."""
    if value is None:
        return "—"
    if float(value).is_integer() and abs(value) < 1e7:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def print_rows(rows: Iterable[Row]) -> None:
    for row in rows:
        print(f"  {row.name}: {fmt(row.value)} {row.unit}  (goal {row.goal}: {row.verdict})", flush=True)


def command_counts(client: redis.Redis) -> dict[str, int]:
    """Calls per command from `INFO commandstats` (`info` itself left out: it is the measurement)."""
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info"}


def delta(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


class Stack:
    """A private Redis, an optional fake Messages API, workers on a private queue, and clients.

    With a `handler` (or `fake=True`) workers use the real `anthropic` SDK against the fake server, which keeps
    connections alive as the real API does (`provider="openai"`: the real `openai` SDK against the fake Chat
    Completions server, driven by the same handlers);
    otherwise they use the scripted provider, whose directives live in the message text.
    """

    def __init__(
        self, name: str, *, handler: Handler | None = None, fake: bool = False, provider: str = "anthropic", **env: str
    ) -> None:
        self.name = name
        self.handler = handler
        self.provider = provider
        self.use_fake = fake or handler is not None
        self.extra_env = env
        self.queue = f"bench-{name}-{uuid.uuid4().hex[:6]}"
        self.workers: list[Worker] = []
        self.clients: list[Client] = []
        self.fake: FakeMessagesServer | None = None
        self.redis_server: EmbeddedRedis | None = None
        self._tmp: Path | None = None
        self._ok = False

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Stack:
        self._tmp = Path(tempfile.mkdtemp(prefix=f"baton-bench-{self.name}-"))
        try:
            self.redis_server = EmbeddedRedis(self._tmp / "redis").start()
            if self.use_fake:
                server = FakeChatServer if self.provider == "openai" else FakeMessagesServer
                self.fake = server(self.handler, keep_alive=True).start()  # as the real API
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        for worker in self.workers:
            with contextlib.suppress(Exception):
                if worker.alive:
                    worker.kill9()
                worker.stop()
        for client in self.clients:
            with contextlib.suppress(Exception):
                client.close()
        if self.fake is not None:
            self.fake.stop()
        if self.redis_server is not None:
            self.redis_server.stop()
        if self._tmp is not None:
            if exc_type is None:
                shutil.rmtree(self._tmp, ignore_errors=True)
            else:
                print(f"  [{self.name}] failed; logs kept in {self._tmp}", file=sys.stderr)

    # -- parts -----------------------------------------------------------------------------------

    @property
    def tmp(self) -> Path:
        assert self._tmp is not None
        return self._tmp

    @property
    def url(self) -> str:
        assert self.redis_server is not None
        return self.redis_server.url

    @property
    def env(self) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", str(self.tmp)),
            "PYTHONPATH": str(REPO),
            "BATON_REDIS_URL": self.url,
            "BATON_QUEUE": self.queue,
            "BATON_PROVIDER": "anthropic" if self.use_fake else "scripted",
            "BATON_TOOLS": TOOLS,
            "BATON_BACKOFF_SCALE": "0",
            "BATON_MODEL": "claude-bench",
            "ANTHROPIC_API_KEY": FAKE_KEY,
            **self.extra_env,
        }
        if self.fake is not None and self.provider == "openai":
            env.update({"BATON_PROVIDER": "openai", "BATON_MODEL": "gpt-bench", "OPENAI_BASE_URL": self.fake.url,
                        "OPENAI_API_KEY": FAKE_OPENAI_KEY, **self.extra_env})
        elif self.fake is not None:
            env["ANTHROPIC_BASE_URL"] = self.fake.url
        return env

    def worker(self, name: str = "w1", *, concurrency: int = 2, pool: str | None = None, repo: Path = REPO,
               **env: str) -> Worker:
        """Start a real `celery -A tasks worker` on this stack's queue and wait until it is ready (`repo`: the checkout
        it runs, its code imported from there)."""
        worker = Worker(name, {**self.env, "PYTHONPATH": str(repo), **env}, self.tmp, concurrency=concurrency,
                        pool=pool, repo=repo)
        self.workers.append(worker)
        return worker.start(timeout=60)

    def client(self, **env: str) -> Client:
        merged = {**self.env, **env}
        overrides = {k.removeprefix("BATON_").lower(): v for k, v in merged.items() if k.startswith("BATON_")}
        client = Client(Settings(**overrides))
        self.clients.append(client)
        return client

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)


def ping(client: Client, queue: str, timeout: float = 10) -> None:
    """One bare `baton.ping` round trip: enqueue, run in the worker, read the result back."""
    client._celery.send_task("baton.ping", queue=queue).get(timeout=timeout)


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of `fn` took."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.02, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
