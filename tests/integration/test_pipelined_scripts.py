"""Scripts sent in a pipeline with other writes, on a real redis-server counted by MONITOR: live text's write round,
a write confirmed by WAIT, the poller's lease renewal. Each goes as plain EVALSHA in its one round trip (redis-py's
pipeline of script objects asks SCRIPT EXISTS first, a round trip more every time), and a server that lost its
scripts (a restart; SCRIPT FLUSH here) still gets each write, once."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from agent.loop.cancel import CancelToken
from tasks.execution.live import FLUSH_SECONDS, RedisLiveText
from tasks.execution.live_writer import LiveWriter
from tasks.execution.watcher import Watcher
from tasks.store import keys
from tasks.store.fenced import Batch, Fence, ReplicationUnconfirmed
from tasks.store.lease import Lease
from tests.support import monitor

pytestmark = pytest.mark.integration

OWNER = keys.owner("chat", "c1")


@pytest.fixture
def client(redis_server: Any) -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(redis_server.url)
    yield r
    r.close()


def sent_by(url: str, action: Callable[[], Any]) -> list[str]:
    """The commands clients sent while `action` ran, by name (not those its scripts ran)."""
    probe, address = monitor.probe(url)
    watching = monitor.Monitor(url, address)
    try:
        probe.echo(monitor.START)
        action()
        probe.echo(monitor.END)
    finally:
        watching.close()
        probe.close()
    return [_named(entry["command"]) for entry in watching.seen if entry["client_type"] != "lua"]


def _named(command: str) -> str:
    """A command's name, with its subcommand for SCRIPT (EXISTS, LOAD)."""
    words = command.split(" ", 2)
    return " ".join(words[:2]) if words[0] == "SCRIPT" else words[0]


class _Rounds(LiveWriter):
    """A writer whose rounds the test makes (no thread)."""

    def ask(self, unit: Any) -> None:
        with self._cv:
            self._asked[id(unit)] = unit


def _streaming(client: redis.Redis, writer: LiveWriter) -> RedisLiveText:
    client.set(keys.lease(OWNER), "tok")
    fence = Fence(client, keys.lease(OWNER), "tok")
    return RedisLiveText(client, fence, owner_id=OWNER, unit_id="t1", generation=1, loaded={}, writer=writer)


def _texts(client: redis.Redis) -> list[str]:
    return [json.loads(fields[b"e"])["text"] for _, fields in client.xrange(keys.events(OWNER))]


@pytest.mark.parametrize("lost", [False, True], ids=["scripts loaded", "scripts lost"])
def test_a_live_text_round_is_one_evalsha_and_writes_once(client, redis_server, lost):
    writer = _Rounds(client, interval=FLUSH_SECONDS)
    live = _streaming(client, writer)
    live.text("m1", 1, "a")
    writer.write_round()  # the server has the script
    if lost:
        client.script_flush()
    live.text("m1", 1, "b")
    sent = sent_by(redis_server.url, writer.write_round)
    # a server that lost it: the NOSCRIPT read, the script loaded, the write made once (no second NOSCRIPT first)
    assert sent == (["EVALSHA", "SCRIPT LOAD", "EVALSHA"] if lost else ["EVALSHA"])
    assert _texts(client) == ["a", "b"]


@pytest.mark.parametrize("lost", [False, True], ids=["scripts loaded", "scripts lost"])
def test_a_write_waited_for_by_replicas_is_its_script_and_wait_in_one_trip(client, redis_server, lost):
    """No replica here: WAIT times out (1 ms) and says none confirmed; the write is in, once."""
    client.set("lease", "tok")
    fence = Fence(client, "lease", "tok")
    fence.commit(Batch().add("SET", "warm", "1"))
    if lost:
        client.script_flush()

    def committed() -> None:
        with pytest.raises(ReplicationUnconfirmed, match="0 of 1 replicas"):
            fence.commit(Batch().add("RPUSH", "steps", "entry"), replicas=1, timeout_ms=1)

    sent = sent_by(redis_server.url, committed)
    assert sent == (["EVALSHA", "WAIT", "SCRIPT LOAD", "EVALSHA", "WAIT"] if lost else ["EVALSHA", "WAIT"])
    assert client.lrange("steps", 0, -1) == [b"entry"]


@pytest.mark.parametrize("lost", [False, True], ids=["scripts loaded", "scripts lost"])
def test_a_beats_renewal_goes_in_its_one_trip_and_renews_a_server_that_lost_the_script(client, redis_server, lost):
    lease = Lease(client, keys.lease(OWNER), "t1|w@h|x|y", 15.0)
    assert lease.acquire()
    cancel = CancelToken()
    watcher = Watcher(client, lease, owner_id=OWNER, unit_id="t1", hostname="w@h", cancel=cancel)
    watcher.poll_once()  # the server has the script
    if lost:
        client.script_flush()
    client.pexpire(keys.lease(OWNER), 5000)
    sent = sent_by(redis_server.url, watcher.poll_once)
    assert sent == (["EVALSHA", "ZADD", "MGET", "EXISTS", "EVALSHA", "SCRIPT LOAD", "EVALSHA"] if lost
                    else ["EVALSHA", "ZADD", "MGET", "EXISTS"])
    assert client.pttl(keys.lease(OWNER)) > 14000 and not watcher.lease_lost and not cancel.is_set()
