"""A fenced write sent ahead (`Fence.send_ahead`): its reply is read by the fence's next write, on a real
redis-server's sockets, since what is tested is a connection held out of the pool between a send and its read."""

from __future__ import annotations

import pytest
import redis

from agent.errors import LeaseLost, LeaseLostUnsent
from tasks.store.direct import SentAhead
from tasks.store.fenced import Batch, Fence
from tasks.store.journal import Riding
from tests.support.round_trips import through_client


@pytest.fixture
def client(redis_server):  # type: ignore[no-untyped-def]
    r = redis.Redis.from_url(redis_server.url)
    r.set("lease", "tok")
    yield r
    r.close()


def replies_are_their_own(client: redis.Redis, n: int = 40) -> bool:
    """Every pooled connection answers each command with its own reply (none holds a stale one)."""
    client.mset({f"k{i}": f"v{i}" for i in range(n)})
    pipes = [client.pipeline(transaction=False) for _ in range(4)]  # several connections out at once
    for i, pipe in enumerate(pipes):
        pipe.get(f"k{i}")
    return [p.execute() for p in pipes] == [[f"v{i}".encode()] for i in range(4)] and all(
        client.get(f"k{i}") == f"v{i}".encode() for i in range(n)
    )


def test_a_write_sent_ahead_is_confirmed_by_the_next_write_in_order(client):
    """The write goes out at once and the caller goes on (a command meanwhile gets its own reply, on another
    connection); the next commit reads the write's reply first, then sends its own, which comes after it."""
    fence = Fence(client, "lease", "tok")
    fence.commit(Batch().add("SET", "warm", "1"))  # the server has the script (see the NOSCRIPT test)
    fence.send_ahead(Batch().add("RPUSH", "steps", "answer"))
    assert client.get("warm") == b"1"
    assert fence.commit(Batch().add("RPUSH", "steps", "result").read("LRANGE", "steps", "0", "-1")) == [
        [b"answer", b"result"]
    ]
    assert replies_are_their_own(client)


def test_a_write_sent_ahead_that_finds_the_lease_lost_stops_the_next_write_before_it_is_sent(client):
    """A write sent ahead under a lease taken over writes nothing, and says so at the fence's next write, which
    raises `LeaseLost` before it sends anything of its own: a commit, or a read tool's result riding the next model
    call's preflight (`LeaseLostUnsent` there: that call is not sent, and its budget reservation costs nothing)."""
    fence = Fence(client, "lease", "tok")
    fence.commit(Batch().add("SET", "warm", "1"))
    client.set("lease", "another")
    sent = through_client(client)
    fence.send_ahead(Batch().add("RPUSH", "steps", "answer"))
    with pytest.raises(LeaseLost):
        fence.commit(Batch().add("RPUSH", "steps", "result"))
    assert sent == []  # the commit never went
    held = Batch().add("RPUSH", "steps", "result")
    fence.hold(held)
    fence.send_ahead(Batch().add("RPUSH", "steps", "answer"))
    riding = Riding(fence, held, Batch().read("GET", "stop"), lambda stop, draining: None)
    with pytest.raises(LeaseLostUnsent), riding.sending():  # the model call it leads is not sent: it cost nothing
        pass
    assert sent == [] and client.exists("steps") == 0
    assert replies_are_their_own(client)


def test_a_write_sent_ahead_to_a_server_without_its_script_is_run_once(client):
    """A restarted server lacks the script: the NOSCRIPT reply is read, and the write is run then (once)."""
    fence = Fence(client, "lease", "tok")
    fence.commit(Batch().add("SET", "warm", "1"))
    client.script_flush()
    fence.send_ahead(Batch().add("RPUSH", "steps", "answer"))
    fence.confirm_ahead()
    assert client.lrange("steps", 0, -1) == [b"answer"]
    assert replies_are_their_own(client)


def test_a_write_sent_ahead_and_never_confirmed_gives_its_connection_back(redis_server):
    """An execution that breaks off with a write out drops it (whether it was applied is not known, as for a write
    whose connection broke): its connection goes back to the pool, closed, so its reply is nobody's. On a pool of one
    connection, a leak would leave the next command waiting for ever (here, a second)."""
    pool = redis.BlockingConnectionPool.from_url(redis_server.url, max_connections=1, timeout=1)
    client = redis.Redis(connection_pool=pool)
    client.set("lease", "tok")
    fence = Fence(client, "lease", "tok")
    fence.commit(Batch().add("SET", "warm", "1"))
    fence.send_ahead(Batch().add("RPUSH", "steps", "answer"))
    fence.drop_ahead()
    assert client.get("warm") == b"1"
    fence.drop_ahead()  # nothing out: nothing to do
    assert fence.commit(Batch().read("GET", "warm")) == [b"1"]
    client.close()


def test_nothing_is_sent_ahead_on_a_client_that_holds_one_connection(client, redis_server):
    """A single-connection client has no connection to spare for a reply read later: the write is made at once."""
    single = redis.Redis.from_url(redis_server.url, single_connection_client=True)
    fence = Fence(single, "lease", "tok")
    assert SentAhead.hold(single, fence._script, ["lease"], ["tok", ""]) is None
    fence.send_ahead(Batch().add("RPUSH", "steps", "answer"))
    assert single.lrange("steps", 0, -1) == [b"answer"]
    single.close()
