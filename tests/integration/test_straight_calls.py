"""A registered script's call sent straight on a connection held from the client's pool (tasks/store/direct.py), on a
real redis-server's sockets: what redis-py's client would have done for it, without its bookkeeping."""

from __future__ import annotations

import pytest
import redis

from tasks.store.scripts import registered
from tests.support.round_trips import through_client

PUSH = "return redis.call('RPUSH', KEYS[1], ARGV[1])"
WRONG = "return redis.call('INCR', KEYS[1])"


@pytest.fixture
def client(redis_server):  # type: ignore[no-untyped-def]
    r = redis.Redis.from_url(redis_server.url)
    yield r
    r.close()


def replies_are_their_own(client: redis.Redis, n: int = 20) -> bool:
    """Every pooled connection answers each command with its own reply (none holds a stale one)."""
    client.mset({f"k{i}": f"v{i}" for i in range(n)})
    return all(client.get(f"k{i}") == f"v{i}".encode() for i in range(n))


def test_a_script_call_goes_straight_on_a_pooled_connection(client):
    """Once the server has the script, a call is one EVALSHA on a held connection: nothing through the client."""
    push = registered(client, PUSH)
    assert push(keys=["steps"], args=["a"]) == 1  # the first call loads it (NOSCRIPT, then through the client)
    sent = through_client(client)
    assert push(keys=["steps"], args=["b"]) == 2
    assert sent == [] and client.lrange("steps", 0, -1) == [b"a", b"b"]
    assert replies_are_their_own(client)


def test_a_server_without_the_script_runs_the_call_once(client):
    """A restarted server lacks the script: the NOSCRIPT reply is read whole, the script is loaded, and the call runs
    through the client, once (not a second EVALSHA that would answer NOSCRIPT again)."""
    push = registered(client, PUSH)
    push(keys=["steps"], args=["a"])
    client.script_flush()
    sent = through_client(client)
    assert push(keys=["steps"], args=["b"]) == 2
    assert sent == ["SCRIPT LOAD", "EVALSHA"]  # after the straight EVALSHA's NOSCRIPT
    assert client.lrange("steps", 0, -1) == [b"a", b"b"]
    assert replies_are_their_own(client)


def test_a_call_whose_connection_the_server_closed_runs_once_through_the_client(client):
    """The pooled connection was closed by the server between two calls (a restart, a timeout, CLIENT KILL): the call
    finds it broken, the connection is dropped, and the client runs the call, once."""
    push = registered(client, PUSH)
    push(keys=["steps"], args=["a"])
    killer = redis.Redis.from_url(_url(client))
    assert killer.client_kill_filter(_type="normal", skipme=True) >= 1
    killer.close()
    assert push(keys=["steps"], args=["b"]) == 2
    assert client.lrange("steps", 0, -1) == [b"a", b"b"]
    assert replies_are_their_own(client)


def test_an_error_reply_is_raised_and_leaves_the_connection_clean(client):
    """A script the server runs and fails answers an error: raised to the caller, the reply read whole."""
    wrong = registered(client, WRONG)
    client.set("text", "not a number")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        wrong(keys=["text"])
    with pytest.raises(redis.ResponseError, match="not an integer"):
        wrong(keys=["text"])  # the second on a connection the first gave back
    assert replies_are_their_own(client)


def test_a_call_on_a_pipeline_is_queued_on_it(client):
    """A script called on a pipeline is one of the pipeline's commands, sent when it executes, not straight."""
    push = registered(client, PUSH)
    push(keys=["steps"], args=["a"])
    pipe = client.pipeline(transaction=False)
    push(keys=["steps"], args=["b"], client=pipe)
    assert client.lrange("steps", 0, -1) == [b"a"]
    assert pipe.execute() == [2]


def _url(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"
