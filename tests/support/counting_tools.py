"""Counting tool doubles: every call is counted in Redis, so counts hold across worker processes.

Loaded by workers through `BATON_TOOLS=tests.support.counting_tools:TOOLS`.
"""

from __future__ import annotations

import os

import redis

from agent.tools import tool

COUNT_KEY = "test:calls:{name}"
CALLS_KEY = "test:calls:log"
RELEASE_KEY = "test:release"
STARTED_KEY = "test:started"


def _redis() -> redis.Redis:
    # No socket timeout: blocking_write waits up to 60 s in BLPOP (redis-py defaults to 5 s).
    url = os.environ.get("BATON_TEST_COUNTER_URL") or os.environ["BATON_REDIS_URL"]
    return redis.Redis.from_url(url, socket_timeout=None)


def _count(name: str, detail: str) -> int:
    client = _redis()
    client.rpush(CALLS_KEY, f"{name}:{detail}")
    return int(client.incr(COUNT_KEY.format(name=name)))


def calls(client: redis.Redis, name: str) -> int:
    value = client.get(COUNT_KEY.format(name=name))
    return int(value) if value else 0


@tool(effect="read")
def lookup(key: str) -> str:
    """Look a key up (counts its calls)."""
    n = _count("lookup", key)
    return f"value-of-{key} (call {n})"


@tool(effect="write")
def record_note(note: str) -> str:
    """Record a note (a side effect; counts its calls)."""
    n = _count("record_note", note)
    return f"recorded {note!r} (call {n})"


@tool(effect="write")
def blocking_write(note: str) -> str:
    """A write that blocks until the test releases it (counts its calls)."""
    client = _redis()
    n = _count("blocking_write", note)
    client.rpush(STARTED_KEY, note)
    client.blpop([RELEASE_KEY], timeout=60)
    return f"wrote {note!r} (call {n})"


@tool(effect="write", approval=True)
def deploy(env: str) -> str:
    """Deploy to an environment: waits for a person's approval first (counts its calls)."""
    n = _count("deploy", env)
    return f"deployed to {env} (call {n})"


TOOLS = [lookup, record_note, blocking_write, deploy]
