"""Leases: one live execution per chat or run, heartbeated, taken over only after expiry."""

from __future__ import annotations

import os
import socket
import uuid

import redis

from tasks.store.replies import text_or_none
from tasks.store.scripts import registered, run_script

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

    def renew(self, client: redis.Redis | redis.client.Pipeline | None = None) -> bool:
        """Extend our lease; with a pipeline, queue the renewal and return True (read it from `execute`)."""
        result = run_script(self._renew, [self.key], [self.token, self.ttl_ms], client)
        return True if client is not None else bool(result)

    def release(self) -> None:
        self._release(keys=[self.key], args=[self.token])
