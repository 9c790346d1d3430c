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
    """Commands by name: those clients sent (less `leave_out`, the broker's upkeep: `broker_upkeep`, and the worker's
    timed looks: `timed_looks`), and those scripts ran."""
    sent: Counter[str] = Counter()
    scripted: Counter[str] = Counter()
    upkeep = broker_upkeep(entries) | timed_looks(entries)
    for at, entry in enumerate(entries):
        if at in upkeep:
            continue
        name = _name(entry)
        if entry["client_type"] == "lua":
            scripted[name] += 1
        elif name not in leave_out:
            sent[name] += 1
    return sent, scripted


def shown(counts: Counter[str], turns: int) -> str:
    return ", ".join(f"{name} {n / turns:.2f}" for name, n in counts.most_common())


# kombu's binding tables: what its Redis transport keeps alive for an expiring queue (the worker's pidbox), on a timer
# of the worker's main process (a third of the queue's x-expires, and once soon after it starts), never for a message.
_KOMBU_BINDINGS = "_kombu.binding"
_WRAPPING = {"MULTI", "EXEC", "SCRIPT"}


def broker_upkeep(entries: list[dict[str, Any]]) -> set[int]:
    """The positions in `entries` of the broker's upkeep of its binding tables: each command that names them, what
    wraps it on its connection (the transaction's MULTI and EXEC, redis-py's SCRIPT EXISTS before a pipeline of
    scripts and the SCRIPT LOAD after a NOSCRIPT) and the commands its scripts ran. Timed, like the task events'
    PUBLISH: when it falls in a count depends on when the worker started, not on what the turns did."""
    upkeep = {at for at, entry in enumerate(entries) if _KOMBU_BINDINGS in entry["command"]}
    by_connection: dict[str, list[int]] = {}
    for at, entry in enumerate(entries):
        if entry["client_type"] != "lua":
            by_connection.setdefault(f"{entry['client_address']}:{entry['client_port']}", []).append(at)
    for sent in by_connection.values():
        for i, at in enumerate(sent):
            name = _name(entries[at])
            if name not in _WRAPPING:
                continue
            # MULTI and SCRIPT go with the command after them on the connection, EXEC with the one before.
            around = reversed(sent[:i]) if name == "EXEC" else iter(sent[i + 1:])
            wrapped = next((other for other in around if _name(entries[other]) not in _WRAPPING), None)
            if wrapped in upkeep:
                upkeep.add(at)
    for at in sorted(upkeep):
        # A script's commands follow its EVALSHA in MONITOR's feed, nothing between (a script runs alone).
        following = at + 1
        while following < len(entries) and entries[following]["client_type"] == "lua":
            upkeep.add(following)
            following += 1
    return upkeep


def timed_looks(entries: list[dict[str, Any]]) -> set[int]:
    """The positions in `entries` of the worker's own timed traffic: its pool child's poller, every 0.5 s while a unit
    runs (the stop keys' MGET and the drain flag's EXISTS, tasks/execution/watcher.py), and its main process's sweeps,
    every 2 s (a ZRANGEBYSCORE of each index, tasks/store/indexes.py). A turn's own work sends none of them (the take
    reads the flags in its script). How many fall in a count follows how long the turns took, not what they did: under
    two busy loops beside the suite, 12 turns met 2 looks and 4 scans, and passed the ceiling by 0.17 a turn."""
    timed: set[int] = set()
    for at, entry in enumerate(entries):
        if entry["client_type"] == "lua":
            continue
        name, _, rest = str(entry["command"]).partition(" ")
        args = rest.split(" ")
        match name.upper():
            case "ZRANGEBYSCORE":
                timed.add(at)
            case "MGET" if all(arg.endswith(":stop") for arg in args):
                timed.add(at)
            case "EXISTS" if len(args) == 1 and ":drain:" in args[0]:
                timed.add(at)
    return timed


def _name(entry: dict[str, Any]) -> str:
    return str(entry["command"]).split(" ", 1)[0].upper()
