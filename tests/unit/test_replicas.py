"""How many replicas a write-ahead entry waits for: the master's online replicas, at most the setting, read
from `INFO replication` and cached a few seconds per client."""

from __future__ import annotations

import pytest
from redis._parsers.helpers import parse_info

from tasks.store.replicas import REPLICA_COUNT_TTL, ReplicaCounts, online_replicas, replicas_to_confirm


def _info(*lines: str, connected: int | None = None) -> dict:
    """An `INFO replication` reply as redis-py parses it."""
    head = ["# Replication", "role:master"]
    count = len(lines) if connected is None else connected
    raw = "\r\n".join([*head, f"connected_slaves:{count}", *lines, "master_replid:abc", ""])
    return parse_info(raw)


ONLINE = "slave{n}:ip=127.0.0.1,port=638{n},state=online,offset=100,lag=0"
SYNCING = "slave{n}:ip=127.0.0.1,port=638{n},state=wait_bgsave,offset=0,lag=0"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([], 0),  # a promoted replica, alone: nothing to wait for
        ([ONLINE.format(n=0)], 1),
        ([ONLINE.format(n=0), ONLINE.format(n=1)], 2),
        # A replica still syncing acknowledges nothing until it has loaded the data: not counted.
        ([ONLINE.format(n=0), SYNCING.format(n=1)], 1),
        ([SYNCING.format(n=0)], 0),
    ],
)
def test_only_online_replicas_are_counted(lines, expected):
    assert online_replicas(_info(*lines)) == expected


def test_connected_slaves_is_the_answer_when_no_replica_line_parses():
    assert online_replicas({"role": "master", "connected_slaves": 2}) == 2
    assert online_replicas({"role": "master"}) == 0
    assert online_replicas({"connected_slaves": "garbage"}) == 0


@pytest.mark.parametrize(
    ("online", "minimum", "expected"),
    [(0, 1, 0), (1, 1, 1), (2, 1, 1), (3, 2, 2), (1, 2, 1), (2, 0, 0), (0, 0, 0)],
)
def test_wait_asks_for_the_online_replicas_at_most_the_setting(online, minimum, expected):
    assert replicas_to_confirm(online, minimum) == expected


class FakeMaster:
    """Answers INFO replication with whatever replicas the test gives it, counting the reads."""

    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)
        self.reads = 0

    def info(self, section: str) -> dict:
        assert section == "replication"
        self.reads += 1
        return _info(*self.lines)


def test_the_count_is_read_once_per_ttl_per_client_and_forgotten_on_demand():
    now = [100.0]
    counts = ReplicaCounts(clock=lambda: now[0])
    master, other = FakeMaster(ONLINE.format(n=0)), FakeMaster()
    assert counts.count(master) == 1 and counts.count(other) == 0
    master.lines = []  # the replica is gone: the cached reading stands until its TTL is up
    now[0] += REPLICA_COUNT_TTL - 0.1
    assert counts.count(master) == 1 and master.reads == 1
    now[0] += 0.2
    assert counts.count(master) == 0 and master.reads == 2
    master.lines = [ONLINE.format(n=0)]
    counts.forget(master)  # a WAIT that was not confirmed: read anew at once
    assert counts.count(master) == 1 and master.reads == 3
    assert other.reads == 1


def test_a_reading_made_for_another_purpose_primes_the_cache():
    counts = ReplicaCounts(clock=lambda: 5.0)
    master = FakeMaster()
    assert counts.note(master, _info(ONLINE.format(n=0))) == 1
    assert counts.count(master) == 1 and master.reads == 0
