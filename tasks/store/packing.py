"""Commands packed by hiredis in one call: what every store client of Baton's sends its commands with.

redis-py 8's hiredis packer runs each argument through its encoder in Python before hiredis packs them: 70 µs for
the ~100 arguments of a fenced write, which a turn sends several of (bench/RESULTS.md). hiredis takes str, bytes,
int and float as they are and writes the same bytes (str as UTF-8, numbers as `repr`), in 8 µs. Whatever it
refuses (a bool, a memoryview, None) and a command name holding a space go to redis-py's own packer, which splits
the name, and encodes or refuses the rest as it always did.

Handed to redis-py as a connection's `command_packer` (plain and Sentinel clients, through their pools' connection
options), or by the connection class a cluster's node pools build (`PackedConnection`). redis-py's asyncio connections
take no `command_packer`: a plain asyncio client's pool builds `async_connection_class(url)`, which sets it (~60 µs of
an asyncio client's ~520 µs of CPU a `send_message`). The asyncio Sentinel and cluster clients build connections of
their own classes, and pack as redis-py does.
"""

from __future__ import annotations

from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis._parsers.encoders import Encoder
from redis.connection import Connection, PythonRespSerializer, SSLConnection

_BUFFER_CUTOFF = 6000  # redis-py's own: a longer argument is sent as a chunk of its own, not copied


class HiredisPacker:
    """A connection's `command_packer`: `pack(*args)` -> the command's bytes, as a list of chunks."""

    def __init__(self) -> None:
        self._fallback = PythonRespSerializer(_BUFFER_CUTOFF, Encoder("utf-8", "strict", False).encode).pack

    def pack(self, *args: Any) -> list[bytes]:
        name = args[0]
        if (isinstance(name, str) and " " not in name) or (isinstance(name, bytes) and b" " not in name):
            try:
                return [hiredis.pack_command(args)]
            except TypeError:  # not str, bytes, int or float: redis-py's packer encodes it, or says what is wrong
                pass
        packed: list[bytes] = self._fallback(*args)
        return packed


PACKER = HiredisPacker()


class PackedConnection(Connection):
    """A cluster node's connection (`connection_class`), packing with `PACKER`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "command_packer": PACKER})


class PackedSSLConnection(SSLConnection):
    """The same over TLS (`rediss://`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "command_packer": PACKER})


class _PacksAsync:
    """An asyncio connection whose commands `PACKER` packs (redis-py's asyncio connections take no `command_packer`)."""

    _command_packer: Any

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._command_packer = PACKER


class PackedAsyncConnection(_PacksAsync, aioredis.Connection):
    pass


class PackedAsyncSSLConnection(_PacksAsync, aioredis.SSLConnection):
    pass


class PackedAsyncUnixConnection(_PacksAsync, aioredis.UnixDomainSocketConnection):
    pass


def async_connection_class(url: str) -> type[aioredis.connection.AbstractConnection]:
    """The packed asyncio connection class for `url`'s scheme (as `from_url` would pick redis-py's own)."""
    if url.startswith("unix://"):
        return PackedAsyncUnixConnection
    return PackedAsyncSSLConnection if url.startswith("rediss://") else PackedAsyncConnection
