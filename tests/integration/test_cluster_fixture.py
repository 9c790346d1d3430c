"""The private Redis Cluster (tests/support/redis_cluster.py) is a real cluster before anything is built on it.

Keys spread over every master, a master killed with -9 comes back with its keys from its AOF, and with a replica
per master a killed master's replica takes over while a cluster client keeps reading and writing every key.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from tests.support.redis_cluster import PrivateCluster, find_cluster_binaries, key_slot

# One group: two clusters of up to six nodes side by side on a small machine would slow each other's failovers.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("cluster")]

KEYS = [f"key:{i}" for i in range(200)]


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Path:
    if find_cluster_binaries() is None:
        pytest.skip("a Redis Cluster needs redis-server and redis-cli 7 or later")
    return tmp_path / "cluster"


@pytest.fixture
def started(cluster_dir: Path) -> Iterator[PrivateCluster]:
    began = time.monotonic()
    with PrivateCluster(cluster_dir, masters=3) as cluster:
        print(f"3 masters started in {time.monotonic() - began:.2f}s")
        yield cluster


@pytest.fixture
def replicated(cluster_dir: Path) -> Iterator[PrivateCluster]:
    began = time.monotonic()
    with PrivateCluster(cluster_dir, masters=3, replicas=1) as cluster:
        print(f"3 masters + 3 replicas started in {time.monotonic() - began:.2f}s")
        yield cluster


def _client(cluster: PrivateCluster) -> RedisCluster:
    nodes = [ClusterNode(*address.split(":")) for address in cluster.startup_nodes.split(",")]
    return RedisCluster(startup_nodes=nodes, decode_responses=True)


def _keys_on(port: int) -> set[str]:
    with redis.Redis(port=port, decode_responses=True) as node:
        return set(node.keys("*"))


def test_keys_spread_over_every_master_and_survive_a_kill9(started: PrivateCluster) -> None:
    client = _client(started)
    try:
        for key in KEYS:
            client.set(key, f"value of {key}")
        assert len({key_slot(k) for k in KEYS}) > 150

        masters = started.masters()
        held = {m.port: _keys_on(m.port) for m in masters}
        assert all(held.values()), held
        assert set().union(*held.values()) == set(KEYS)
        for master in masters:
            assert all(started.master_for_slot(key_slot(k)) is master for k in held[master.port])

        victim = started.master_for_slot(key_slot(KEYS[0]))
        old_pid = victim.pid
        victim.restart()
        assert victim.pid != old_pid
        assert _keys_on(victim.port) == held[victim.port]  # from its AOF, no replica to copy them from
        assert all(client.get(k) == f"value of {k}" for k in KEYS)
    finally:
        client.close()


def test_a_replica_takes_over_a_killed_master(replicated: PrivateCluster) -> None:
    assert len(replicated.nodes) == 6
    client = _client(replicated)
    try:
        for key in KEYS:
            client.set(key, f"value of {key}")
        replicated.wait_replicated()  # a replica promoted with fewer keys would fail the test, not the cluster

        victim = replicated.master_for_slot(key_slot(KEYS[0]))
        replica = replicated.replica_of(victim)
        killed = time.monotonic()
        promoted = replicated.fail_master(victim)
        print(f"failover: replica {promoted.port} promoted {time.monotonic() - killed:.2f}s after kill -9")

        assert promoted is replica
        assert victim not in replicated.masters()
        assert promoted in replicated.masters()
        assert replicated.master_for_slot(key_slot(KEYS[0])) is promoted
        assert all(client.get(k) == f"value of {k}" for k in KEYS)
        for key in KEYS:
            client.set(key, f"new value of {key}")
        assert all(client.get(k) == f"new value of {k}" for k in KEYS)
    finally:
        client.close()
