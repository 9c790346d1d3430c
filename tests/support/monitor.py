"""Counting what a Redis server runs, with MONITOR: the commands clients send and those their scripts run.

`Monitor` reads every command a server runs between two markers (`ECHO` of `START` and of `END`, sent by the test on
its own connection, whose commands are left out) on a thread; `by_kind` tallies them by name.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import redis

START, END = "baton-count-start", "baton-count-end"


class Monitor:
    """Every command the server at `url` runs from `START` to `END`, less those of the connection at `probe`."""

    def __init__(self, url: str, probe: str) -> None:
        self._probe = probe
        self._client = redis.Redis.from_url(url)
        self._monitor = self._client.monitor()
        self._monitor.__enter__()  # MONITOR is in force once this returns: nothing sent after it is missed
        self.seen: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        counting = False
        for entry in self._monitor.listen():
            command = entry["command"]
            if command == f"ECHO {START}":
                counting = True
            elif command == f"ECHO {END}":
                return
            elif counting and f"{entry['client_address']}:{entry['client_port']}" != self._probe:
                self.seen.append(entry)

    def close(self) -> None:
        self._thread.join(30)
        self._monitor.__exit__(None, None, None)
        self._client.close()


def probe(url: str) -> tuple[redis.Redis, str]:
    """A client of one connection, and its address as MONITOR names it (what `Monitor` leaves out)."""
    client = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(url, max_connections=1))
    return client, str(client.client_info()["addr"])


def by_kind(entries: list[dict[str, Any]], leave_out: set[str] = frozenset()) -> tuple[Counter[str], Counter[str]]:
    """Commands by name: those clients sent (less `leave_out`), and those scripts ran."""
    sent: Counter[str] = Counter()
    scripted: Counter[str] = Counter()
    for entry in entries:
        name = entry["command"].split(" ", 1)[0].upper()
        if entry["client_type"] == "lua":
            scripted[name] += 1
        elif name not in leave_out:
            sent[name] += 1
    return sent, scripted


def shown(counts: Counter[str], turns: int) -> str:
    return ", ".join(f"{name} {n / turns:.2f}" for name, n in counts.most_common())
