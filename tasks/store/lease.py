"""Leases: one live execution per chat or run, heartbeated, taken over only after expiry."""

from __future__ import annotations

import os
import socket
import uuid

import redis

from tasks.store.replies import text_or_none
from tasks.store.scripts import queue_script, registered

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def new_token(unit_id: str, node: str = "") -> str:
    """Names the holder (unit, Celery node, host:pid) for operators reading Redis; unique per execution."""
    return f"{unit_id}|{node}|{socket.gethostname()}:{os.getpid()}|{uuid.uuid4().hex[:12]}"


def holder_node(value: str | None) -> str | None:
    """The Celery node name of a lease holder (`name@host`), if it recorded one."""
    parts = value.split("|") if value else []
    return parts[1] or None if len(parts) > 1 else None


def holder_unit(value: str | None) -> str | None:
    return value.split("|", 1)[0] if value else None


class Lease:
    def __init__(self, client: redis.Redis, key: str, token: str, ttl: float) -> None:
        self.client = client
        self.key = key
        self.token = token
        self.ttl_ms = int(ttl * 1000)
        self._renew = registered(client, _RENEW)
        self._release = registered(client, _RELEASE)

    def acquire(self) -> bool:
        return bool(self.client.set(self.key, self.token, nx=True, px=self.ttl_ms))

    def holder(self) -> str | None:
        return text_or_none(self.client.get(self.key))

    def renew(self) -> bool:
        """Extend our lease: False when it is not ours."""
        return bool(self._renew(keys=[self.key], args=[self.token, self.ttl_ms]))

    def queue_renewal(self, pipe: redis.client.Pipeline) -> None:
        """`renew` queued on `pipe`: its reply, read from `execute(raise_on_error=False)`, is NOSCRIPT where the server
        lost the script (then `renew`, which loads it)."""
        queue_script(pipe, self._renew, [self.key], [self.token, self.ttl_ms])

    def release(self) -> None:
        self._release(keys=[self.key], args=[self.token])
