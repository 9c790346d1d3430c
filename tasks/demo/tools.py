"""The demo's tools: a read, a write and a slow write, each counting its calls in Redis.

The counts are how `baton demo` proves "the tool ran once" rather than asserting it.
"""

from __future__ import annotations

import os
import time

import redis

from agent.tools import tool

COUNTS = "baton:demo:calls"


def _count(name: str) -> int:
    client = redis.Redis.from_url(os.environ["BATON_REDIS_URL"])
    try:
        return int(client.hincrby(COUNTS, name, 1))
    finally:
        client.close()


@tool(effect="read")
def lookup_weather(city: str) -> str:
    """Look up today's weather for a city."""
    _count("lookup_weather")
    return f"{city}: 18°C, light rain"


@tool(effect="write")
def save_note(note: str) -> str:
    """Save a note for the user (a side effect that must never happen twice)."""
    n = _count("save_note")
    return f"saved note #{n}: {note}"


@tool(effect="write")
def slow_write(note: str) -> str:
    """Archive something slowly (takes half a minute)."""
    _count("slow_write")
    time.sleep(30)
    return f"archived {note}"


TOOLS = [lookup_weather, save_note, slow_write]
