"""Commands packed by hiredis in one call: the same bytes as redis-py's own packer, its refusals kept, and every
store client of Baton's built with it (no connection made)."""

from __future__ import annotations

import random

import pytest
from redis.connection import Connection
from redis.exceptions import DataError

from config.settings import Settings
from tasks.execution import wiring
from tasks.store.connect import new_store_client
from tasks.store.packing import PACKER, PackedConnection, PackedSSLConnection

OWN = Connection()  # redis-py's packer, as a connection builds it without Baton's


def _packed(packer_output: list[bytes] | list[bytes | memoryview]) -> bytes:
    return b"".join(bytes(chunk) for chunk in packer_output)


def _cases() -> list[tuple[object, ...]]:
    rng = random.Random(7)
    words = ["", "a", "é", "雪", "😀", "\x00", "\r\n", '"{}"', "x" * 7000, "\\u0000baton:text\\u0000"]
    cases: list[tuple[object, ...]] = [
        ("EVALSHA", "2d32", 2, "baton:{chat:c}:lease", "baton:{chat:c}:rec:t", "tok", "", "HSET", "3", '{"a": 1}'),
        ("SET", b"k", b"\xff\x00", "PX", 15000),
        ("ZADD", "z", 1796494830.3134308, "m", -0.0, "n", 1e-7, "o", 10**20, "p"),
        ("PING",),
    ]
    for _ in range(200):
        args = [rng.choice([*words, rng.randint(-(2**63), 2**63), rng.uniform(-1e12, 1e12), b"\x80bytes"])
                for _ in range(rng.randint(0, 40))]
        cases.append(("RPUSH", "k", *args))
    return cases


@pytest.mark.parametrize("args", _cases())
def test_the_packer_writes_what_redis_pys_own_writes(args):
    """str as UTF-8, bytes as they are, ints and floats as `repr`: byte for byte redis-py's own protocol."""
    assert _packed(PACKER.pack(*args)) == _packed(OWN.pack_command(*args))


def test_what_hiredis_refuses_goes_to_redis_pys_packer():
    """A command name holding a space is split, a memoryview sent, and a bool or None refused, as redis-py does."""
    for args in [("SCRIPT LOAD", "return 1"), ("CLIENT SETNAME", "baton"), ("SET", "k", memoryview(b"v"))]:
        assert _packed(PACKER.pack(*args)) == _packed(OWN.pack_command(*args))
    for bad in (True, None, object()):
        with pytest.raises(DataError):
            PACKER.pack("SET", "k", bad)


def test_every_store_client_packs_with_it():
    """The plain client, the units' pooled one, and Sentinel's (their connections' options); a cluster's nodes
    build `PackedConnection`."""
    plain = new_store_client(Settings(redis_url="redis://h:6390/2"))
    pooled = wiring.redis_client("redis://h:6391/0")
    sentinel = new_store_client(Settings(redis_url="redis://:pw@ignored:1/3", redis_sentinels="127.0.0.1:1",
                                         redis_master="baton"))
    for client in (plain, pooled, sentinel):
        assert client.connection_pool.make_connection()._command_packer is PACKER
    assert PackedConnection(host="h")._command_packer is PACKER
    assert PackedSSLConnection(host="h")._command_packer is PACKER


@pytest.mark.parametrize("url", ["redis://h:6390/2", "rediss://h:6390/0", "unix:///tmp/r.sock"])
def test_a_plain_asyncio_store_client_packs_with_it_too(url):
    """redis-py's asyncio connections take no `command_packer`: the pool of a plain asyncio client builds connections
    that set it, of the class its URL's scheme calls for, writing the bytes redis-py's own would."""
    import redis.asyncio as aioredis

    from tasks.store.connect import new_async_store_client

    client = new_async_store_client(Settings(redis_url=url), max_connections=2)
    conn = client.connection_pool.make_connection()
    assert conn._command_packer is PACKER
    scheme = url.partition(":")[0]
    own = {"redis": aioredis.Connection, "rediss": aioredis.SSLConnection, "unix": aioredis.UnixDomainSocketConnection}
    assert isinstance(conn, own[scheme])
    reference = own[scheme](path="/x") if scheme == "unix" else own[scheme](host="h")
    args = ("EVALSHA", "0" * 40, 1, "baton:{chat:c}:lease", "tok", "é 日本", 1.5, 10**20, b"\x00\xff")
    assert _packed(conn.pack_command(*args)) == _packed(reference.pack_command(*args))
