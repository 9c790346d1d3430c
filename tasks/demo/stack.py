"""The demo's private stack: a Redis (embedded unless one is reachable) and real Celery workers it can drain."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import redis

from tasks.demo import conversation as said
from tasks.demo.embedded_redis import EmbeddedRedis, find_redis_server, free_port, reachable
from tasks.demo.local_worker import worker_command
from tasks.store import keys
from tasks.store.lease import holder_node


class DemoStack:
    """A Redis and named Celery workers on one private queue; `stop` ends everything it started."""

    def __init__(self, workdir: Path, *, openai_url: str | None = None) -> None:
        self.workdir = workdir
        # Set: the scripted workers run Baton's OpenAI edge against this server (`baton demo --provider openai`).
        self.openai_url = openai_url
        self.redis: EmbeddedRedis | None = None
        self.url = os.environ.get("BATON_REDIS_URL", "")
        self.queue = f"demo-{uuid.uuid4().hex[:6]}"
        self.live_queue = f"{self.queue}-live"
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.page: subprocess.Popen[bytes] | None = None

    def start_redis(self) -> str:
        if self.url and reachable(self.url):
            return f"using the Redis at {self.url}"
        if find_redis_server() is not None:
            self.redis = EmbeddedRedis(self.workdir / "redis").start()
            self.url = self.redis.url
            return f"started a private redis-server ({self.redis.binary}) on port {self.redis.port}"
        self.url = "redis://localhost:6379/0"
        if reachable(self.url):
            return "using the Redis at redis://localhost:6379/0"
        raise RuntimeError("no Redis reachable and no redis-server binary: pip install 'baton[embedded]'")

    def env(self, *, live: bool = False) -> dict[str, str]:
        """A scripted worker's environment, or (live) one that talks to Anthropic with the user's key.

        Scripted: no key of the user's goes anywhere; with `openai_url`, the script is served by the demo's
        OpenAI-compatible server and the workers reach it through the `openai` provider."""
        drop = ("BATON_",) if live else ("BATON_", "ANTHROPIC_", "OPENAI_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        env.update(
            {
                "BATON_REDIS_URL": self.url,
                "BATON_QUEUE": self.live_queue if live else self.queue,
                "BATON_PROVIDER": "anthropic" if live else "scripted",
                "BATON_TOOLS": "tasks.demo.tools:TOOLS",
                # Two agents in one fleet (scenario 6); the first, the default, has every tool the others use.
                "BATON_AGENTS": "tasks.demo.agents:AGENTS",
                # The directives behind the user's lines live in cues, so the transcript reads as a conversation.
                "BATON_SCRIPTED_CUES": said.CUES_SPEC,
                "BATON_BACKOFF_SCALE": "0.05",
                "BATON_LEASE_TTL": "5",
            }
        )
        if self.openai_url is not None and not live:
            env.update(
                {
                    "BATON_PROVIDER": "openai",
                    "BATON_MODEL": "scripted-agent",
                    "OPENAI_BASE_URL": self.openai_url,
                    "OPENAI_API_KEY": "demo-no-key",  # the SDK wants one; the demo's server reads none
                }
            )
        return env

    def start_worker(self, name: str, *, live: bool = False) -> None:
        log = open(self.workdir / f"worker-{name}.log", "ab")  # noqa: SIM115 - owned by the child process
        cmd = worker_command(self.live_queue if live else self.queue, f"{name}@%h")
        self.workers[name] = subprocess.Popen(cmd, env=self.env(live=live), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while b" ready." not in (self.workdir / f"worker-{name}.log").read_bytes():
            if self.workers[name].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start; see {self.workdir / f'worker-{name}.log'}")
            time.sleep(0.05)

    def start_page(self) -> str:
        """`baton serve` on a free loopback port against the demo's Redis; returns its URL once it answers."""
        port = free_port()
        log = open(self.workdir / "serve.log", "ab")  # noqa: SIM115 - owned by the child process
        cmd = [sys.executable, "-m", "tasks.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
        env = {k: v for k, v in self.env().items() if k != "BATON_API_TOKEN"}  # loopback only: no token needed
        self.page = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while not _answers(f"{url}/healthz"):
            if self.page.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"baton serve did not start; see {self.workdir / 'serve.log'}")
            time.sleep(0.05)
        return url

    def node(self, owner_id: str) -> str | None:
        """The worker (its name in this demo) whose execution holds a chat's or run's lease now."""
        with redis.Redis.from_url(self.url) as conn:
            raw = conn.get(keys.lease(owner_id))
        holder = holder_node(raw.decode() if raw else None)
        return holder.split("@")[0] if holder else None

    def drain_worker(self, name: str) -> float:
        started = time.monotonic()
        self.workers[name].terminate()
        self.workers[name].wait(30)
        return time.monotonic() - started

    def stop(self) -> None:
        for proc in [*self.workers.values(), *([self.page] if self.page is not None else [])]:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if self.redis is not None:
            self.redis.stop()


def _answers(url: str) -> bool:
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as response:
        return bool(response.status == 200)
    return False
