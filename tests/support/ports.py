"""Free loopback ports for the processes the tests start, safe when pytest-xdist runs tests side by side.

`tasks.demo.embedded_redis.free_port` asks the kernel for an ephemeral port and closes it again. Alone that is
fine; with several xdist workers it is a race: another worker's next call may be handed the same port before
our server binds it (a RabbitMQ node binds its AMQP port seconds after we chose it), and a port a test keeps
while its server is down (a Redis or RabbitMQ restart on the same port, an address that must stay
unreachable) can be handed to another worker's server in the meantime, so one test would talk to another's
store. So each xdist worker takes its ports from its own slice of the range below the kernel's ephemeral
range (the kernel hands out ports from that range only for an explicit bind, never for bind(0) or connect()),
one after the other from a random start, so a port is not handed out twice in a session until its slice wraps.
"""

from __future__ import annotations

import functools
import os
import random
import socket
from pathlib import Path

from tasks.demo import embedded_redis

LOWEST = 20000  # above the well-known and most registered service ports


def ephemeral_start(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int | None:
    """The first port the kernel hands out for bind(0)/connect(), or None where it cannot be read."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def worker_slice(lowest: int, top: int, worker: str | None, count: int) -> range:
    """This xdist worker's share of [lowest, top): `worker` is PYTEST_XDIST_WORKER ("gw3"; None when not under
    xdist), `count` is PYTEST_XDIST_WORKER_COUNT. Slices of different workers never overlap."""
    index = int(worker.removeprefix("gw")) if worker else 0
    count = max(count, index + 1, 1)
    size = (top - lowest) // count
    return range(lowest + index * size, lowest + (index + 1) * size)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class PortRange:
    """Hands out the ports of one slice in turn, from a random start, skipping any that is in use."""

    def __init__(self, ports: range) -> None:
        self.ports = ports
        self.next = random.randrange(len(ports))

    def take(self) -> int:
        for _ in range(len(self.ports)):
            port = self.ports[self.next]
            self.next = (self.next + 1) % len(self.ports)
            if _bindable(port):
                return port
        raise RuntimeError(f"no free port in {self.ports.start}-{self.ports.stop - 1}")


@functools.cache  # one per process, made on first use (after xdist has named the worker)
def _this_workers_range() -> PortRange | None:
    top = ephemeral_start()
    if top is None or top - LOWEST < 1000:  # no room below the ephemeral range: the kernel's choice it is
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return PortRange(worker_slice(LOWEST, top, worker, count))


def free_port() -> int:
    """A loopback port no other server of this test session holds or will be handed (see the module doc)."""
    ports = _this_workers_range()
    return ports.take() if ports is not None else embedded_redis.free_port()
