"""Real processes for integration tests: a redis-server on a free port and celery workers.

Each fixture stops what it starts. Nothing here touches the machine's own Redis on 6379.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tasks.demo.embedded_redis import EmbeddedRedis
from tasks.demo.local_worker import worker_command
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]

# gevent is an extra (`baton[gevent]`, which the test extra brings); without it its cases are skipped, not lost.
NEEDS_GEVENT = pytest.mark.skipif(
    importlib.util.find_spec("gevent") is None, reason="gevent is not installed (pip install 'baton[gevent]')"
)
# The pools the drain, stop and kill tests run on: prefork, and the two that hold hundreds of turns per process.
POOLS = ["prefork", "threads", pytest.param("gevent", marks=NEEDS_GEVENT)]


def wait_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition") -> None:
    """Wait for a condition we cannot subscribe to (a process's log line, a port opening)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


class RedisServer(EmbeddedRedis):
    """A private redis-server; `aof=True` for the durability tests (appendfsync everysec). Its port comes from
    tests/support/ports.py, so a restart finds it still free under pytest-xdist."""

    def __init__(self, workdir: Path, *, aof: bool = False, port: int | None = None,
                 password: str | None = None) -> None:
        super().__init__(workdir, aof=aof, port=port or free_port(), password=password)

    def restart(self, *, kill: bool = True) -> None:
        if kill:
            self.kill9()
        else:
            self.stop()
        self.start()


class Worker:
    """A real `celery -A tasks worker` subprocess on the test's own queue."""

    def __init__(
        self, name: str, env: dict[str, str], logdir: Path, *, concurrency: int = 2, pool: str | None = None,
        repo: Path = REPO, consume: str | None = None,
    ) -> None:
        """`repo`: the checkout the worker runs from (another one's code, in `bench.ab_workers`); `consume`: the
        queue its `-Q` names, when not its `BATON_QUEUE`."""
        self.name = name
        self.consume = consume
        self.env = env
        self.log_path = logdir / f"worker-{name}.log"
        self.concurrency = concurrency
        self.pool = pool
        self.repo = repo
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hostname(self) -> str:
        return f"{self.name}@{socket.gethostname()}"

    def start(self, timeout: float = 30) -> Worker:
        queue = self.consume or self.env["BATON_QUEUE"]
        cmd = worker_command(queue, self.hostname, concurrency=self.concurrency, pool=self.pool)
        if hasattr(self, "_log"):  # started again after an exit: the earlier run's handle is done with
            self._log.close()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            cmd, cwd=self.repo, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        wait_until(self._ready, timeout, what=f"worker {self.name} ready")
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"worker {self.name} exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        with open(self.log_path, "rb") as fh:
            fh.seek(self._offset)
            return b" ready." in fh.read()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM: what Kubernetes and docker compose send on a deploy (a warm shutdown)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill9(self) -> None:
        """SIGKILL the whole worker: main process and pool children."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def discard(self) -> None:
        """At teardown: SIGKILL at once. Nothing is asserted after it, and a warm shutdown costs 1.5 s (prefork)
        to 5 s (gevent) per worker on a slow machine; the tests of a warm shutdown call `terminate` or `stop`."""
        with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
            self.kill9()
        if hasattr(self, "_log"):
            self._log.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # stray pool children
        if hasattr(self, "_log"):
            self._log.close()
