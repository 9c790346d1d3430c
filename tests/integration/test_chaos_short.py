"""The short chaos run: runs and chat turns under provider faults, worker kills and a Redis crash, promises kept.

On each broker: the store's Redis, and a private RabbitMQ node the bench starts (its queue then survives the
store's crash, and the lost-message sweep has nothing to look for: RabbitMQ redelivers what a lost worker held).
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.support.processes import NEEDS_GEVENT, REPO
from tests.support.rabbitmq import find_rabbitmq_server

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("broker", "pool"), [
    ("redis", "prefork"),
    ("redis", "threads"),
    pytest.param("redis", "gevent", marks=NEEDS_GEVENT),
    ("amqp", "prefork"),
])
def test_short_chaos_keeps_every_promise(broker: str, pool: str):
    """`python -m bench.chaos --short`: ~45 s of seeded chaos (SIGKILL and SIGTERM of workers, a pool child killed,
    kill -9 of the AOF Redis, dropped/stalled/overloaded streams) over concurrent coding runs and chat turns; then
    every unit ends with a stated outcome, nothing is lost, every write effect ran exactly once (or its call shows
    the interrupted placeholder), no two executions of one unit overlapped, and every history is valid. On both
    brokers, and on the threads and gevent pools too (concurrency 8: every unit of a worker in its one process,
    beaten by one poller); those pools on RabbitMQ are left to `python -m bench.chaos --broker amqp --pool threads`
    (or `gevent`), for CI time."""
    if broker == "amqp" and find_rabbitmq_server() is None:
        pytest.skip("rabbitmq-server is not installed (Debian: apt-get install rabbitmq-server; .ci/run does)")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.chaos", "--short", "--seed", "1", "--broker", broker, "--pool", pool],
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
