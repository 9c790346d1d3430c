"""The short chaos run: runs and chat turns under provider faults, worker kills and a Redis crash, promises kept.

On each broker: the store's Redis, and a private RabbitMQ node the bench starts (its queue then survives the
store's crash, and the lost-message sweep has nothing to look for: RabbitMQ redelivers what a lost worker held).
And once with the store on a private 3-master Redis Cluster (`--store cluster`), the broker a separate plain
Redis, where the crash is kill -9 of one master and its restart.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest

from tests.support.processes import NEEDS_GEVENT, REPO
from tests.support.rabbitmq import find_rabbitmq_server
from tests.support.redis_cluster import find_cluster_binaries

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("store", "broker", "pool"), [
    pytest.param("redis", "redis", "prefork", id="redis-prefork"),
    pytest.param("redis", "redis", "threads", id="redis-threads"),
    pytest.param("redis", "redis", "gevent", marks=NEEDS_GEVENT, id="redis-gevent"),
    pytest.param("redis", "amqp", "prefork", id="amqp-prefork"),
    # With test_cluster.py's tests (xdist group "cluster"): not beside them, each starting its own cluster.
    pytest.param("cluster", "redis", "prefork", marks=pytest.mark.xdist_group("cluster"), id="cluster-redis-prefork"),
])
def test_short_chaos_keeps_every_promise(store: str, broker: str, pool: str):
    """`python -m bench.chaos --short`: ~45 s of seeded chaos (SIGKILL and SIGTERM of workers, a pool child killed,
    kill -9 of the AOF Redis, dropped/stalled/overloaded streams) over concurrent coding runs and chat turns; then
    every unit ends with a stated outcome, nothing is lost, every write effect ran exactly once (or its call shows
    the interrupted placeholder), no two executions of one unit overlapped, and every history is valid. On both
    brokers, and on the threads and gevent pools too (concurrency 8: every unit of a worker in its one process,
    beaten by one poller); those pools on RabbitMQ are left to `python -m bench.chaos --broker amqp --pool threads`
    (or `gevent`), for CI time. On a Redis Cluster store (3 masters, the broker a separate plain Redis) the Redis
    crash is kill -9 of one master, restarted on its AOF, the broker may be killed -9 and restarted too, and every
    check reads the cluster."""
    if broker == "amqp" and find_rabbitmq_server() is None:
        pytest.skip("rabbitmq-server is not installed (Debian: apt-get install rabbitmq-server; .ci/run does)")
    if store == "cluster" and find_cluster_binaries() is None:
        pytest.skip("no Redis 7 redis-server and redis-cli (Debian: apt-get install redis-server; .ci/run does)")
    command = [sys.executable, "-m", "bench.chaos", "--short", "--seed", "1", "--broker", broker, "--pool", pool]
    if store == "cluster":
        command += ["--store", "cluster"]
    if store == "cluster" or broker == "amqp":
        # The broker is not the store: under `everysec` a store killed -9 while its fsync lags (a loaded host) loses
        # writes it acknowledged (a turn's record) while the broker keeps the task, and the turn is lost for real.
        # Baton's promises hold over a store that keeps what it acknowledged; such a deployment runs `always`.
        command += ["--appendfsync", "always"]
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=270)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the bench stops the workers and servers it started on SIGTERM
        out, _ = proc.communicate(timeout=25)
        pytest.fail(f"the short chaos run did not finish in 270 s:\n{out[-8000:]}")
    assert proc.returncode == 0, f"chaos found violations (exit {proc.returncode}):\n{out[-10000:]}"
    assert "violations 0" in out
    assert f"broker {broker}" in out  # the run was on the broker this case names
    if store == "cluster":
        assert "store cluster of 3 masters" in out  # ... and on the cluster store
        assert re.search(r"cluster master restarts [1-9]", out), out[-4000:]  # a master was killed and restarted
