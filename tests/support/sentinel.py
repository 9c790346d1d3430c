"""A private replicated Redis for failover tests: one master, one replica, one Sentinel (`redis-server --sentinel`).

One Sentinel with quorum 1 is enough here: the tests prove that Baton's clients follow a promotion, not that
Sentinel reaches consensus (three Sentinels would only add the seconds of their agreement). Every process is
on a free loopback port and is stopped by `stop()`; nothing touches the machine's Redis on 6379.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import redis

from tasks.demo.embedded_redis import EmbeddedRedis, find_redis_server
from tests.support.ports import free_port
from tests.support.processes import wait_until

MASTER_NAME = "baton"


class ReplicatedRedis:
    """Master + replica + Sentinel; `failover()` kills the master and waits for the replica's promotion."""

    def __init__(self, workdir: Path, *, down_after_ms: int = 1000) -> None:
        binary = find_redis_server()
        if binary is None:
            raise RuntimeError("no redis-server found")
        self.binary = binary
        self.dir = workdir
        self.down_after_ms = down_after_ms
        self.master = EmbeddedRedis(workdir / "a", aof=True, port=free_port())
        self.replica = EmbeddedRedis(workdir / "b", aof=True, port=free_port())
        self.sentinel_port = free_port()
        self.sentinel: subprocess.Popen[bytes] | None = None

    @property
    def sentinels(self) -> str:
        return f"127.0.0.1:{self.sentinel_port}"

    def start(self) -> ReplicatedRedis:
        self.master.start()
        self.replica.start()
        redis.Redis(port=self.replica.port).replicaof("127.0.0.1", self.master.port)
        wait_until(lambda: self._link_up(self.replica.port), 20, what="the replica to sync")
        conf = self.dir / "sentinel.conf"
        conf.write_text(
            "\n".join(
                [
                    f"port {self.sentinel_port}",
                    "bind 127.0.0.1",
                    f"dir {self.dir}",
                    f"logfile {self.dir / 'sentinel.log'}",
                    f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master.port} 1",
                    f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}",
                    f"sentinel failover-timeout {MASTER_NAME} 10000",
                    f"sentinel parallel-syncs {MASTER_NAME} 1",
                    "",
                ]
            )
        )
        self.sentinel = subprocess.Popen(
            [self.binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_until(lambda: self.current_master() == self.master.port, 20, what="the Sentinel to see the master")
        wait_until(lambda: self._sentinel_knows_replica(), 20, what="the Sentinel to discover the replica")
        return self

    def _link_up(self, port: int) -> bool:
        info = redis.Redis(port=port).info("replication")
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    def _sentinel_knows_replica(self) -> bool:
        try:
            return bool(redis.Redis(port=self.sentinel_port).sentinel_slaves(MASTER_NAME))
        except redis.RedisError:
            return False

    def current_master(self) -> int | None:
        """The master's port as the Sentinel reports it."""
        try:
            addr = redis.Redis(port=self.sentinel_port).sentinel_get_master_addr_by_name(MASTER_NAME)
        except redis.RedisError:
            return None
        return int(addr[1]) if addr else None

    def wait_replicated(self, timeout_ms: int = 5000) -> int:
        """WAIT on the master until the replica has every write so far; returns how many replicas acked."""
        return int(redis.Redis(port=self.master.port).execute_command("WAIT", 1, timeout_ms))

    def failover(self, timeout: float = 30) -> float:
        """kill -9 the master; returns the seconds until the Sentinel names the replica as master."""
        killed = time.monotonic()
        self.master.kill9()
        wait_until(lambda: self.current_master() == self.replica.port, timeout, what="the replica's promotion")
        wait_until(
            lambda: redis.Redis(port=self.replica.port).info("replication").get("role") == "master",
            timeout,
            what="the replica to act as master",
        )
        return time.monotonic() - killed

    def pause_replica(self) -> None:
        """SIGSTOP the replica: it stays connected but acknowledges nothing (a replica lagging behind)."""
        assert self.replica.proc is not None
        self.replica.proc.send_signal(signal.SIGSTOP)

    def resume_replica(self) -> None:
        if self.replica.proc is not None:
            self.replica.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.resume_replica()
        if self.sentinel is not None:
            self.sentinel.kill()
            self.sentinel.wait(10)
            self.sentinel = None
        self.master.stop()
        self.replica.stop()
