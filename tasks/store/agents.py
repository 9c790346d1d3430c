"""Agents in the store: what each worker serves (published at start and at every sweep), and the definitions
units pinned themselves to, by version.

Clients validate a turn's agent and model against what is published, so a web app need not import the agents'
module; a worker resuming a unit whose version it does not have reads that version's definition back here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis

from agent.agents import Registry, Resolved
from tasks.store import keys
from tasks.store.replies import text

SEP = "\t"


def publish(client: redis.Redis, registry: Registry, hostname: str, now: float, *, definitions: bool) -> None:
    """Say that `hostname` serves `registry`'s agents as of `now` (and, with `definitions`, store each one's
    definition under its version): one pipeline."""
    pipe = client.pipeline(transaction=False)
    for name, agent in registry.agents.items():
        entry = {**agent.summary(), "default": name == registry.default, "at": now}
        pipe.hset(keys.AGENTS, f"{name}{SEP}{hostname}", json.dumps(entry, separators=(",", ":")))
    if definitions:
        pipe.hset(keys.AGENT_DEFS, mapping={a.version: json.dumps(a.as_dict()) for a in registry.agents.values()})
    pipe.execute()


def store_definition(client: redis.Redis, agent: Resolved) -> None:
    """Keep `agent`'s definition under its version (idempotent: a version is a fingerprint of it)."""
    client.hsetnx(keys.AGENT_DEFS, agent.version, json.dumps(agent.as_dict()))


def definition(client: redis.Redis, version: str) -> Resolved | None:
    """The definition recorded under `version`, or None."""
    raw = client.hget(keys.AGENT_DEFS, version)
    return Resolved.from_dict(json.loads(text(raw))) if raw else None


@dataclass(frozen=True)
class Worker:
    hostname: str
    version: str
    seen_at: float


@dataclass(frozen=True)
class Published:
    """One agent as the fleet serves it: the newest summary seen, and every worker seen serving it."""

    name: str
    summary: dict[str, Any]
    default: bool
    workers: tuple[Worker, ...] = field(default_factory=tuple)

    @property
    def models(self) -> list[str]:
        return list(self.summary.get("models") or [])

    @property
    def queue(self) -> str | None:
        queue = self.summary.get("queue")
        return queue if isinstance(queue, str) else None

    def public(self) -> dict[str, Any]:
        """What `baton agents --json` and `c.agents()` give for it."""
        return {
            **self.summary,
            "default": self.default,
            "workers": [{"hostname": w.hostname, "version": w.version, "seen_at": w.seen_at} for w in self.workers],
        }


def fold(raw: dict[bytes | str, bytes | str], now: float, keep: float) -> tuple[list[Published], list[str]]:
    """The published entries (`HGETALL` of AGENTS) as agents, newest summary first within each, and the fields older
    than `keep` seconds (to forget). Agents in the order of their first worker's listing, the default first."""
    workers: dict[str, list[Worker]] = {}
    newest: dict[str, tuple[float, dict[str, Any], bool]] = {}
    stale: list[str] = []
    for raw_field, raw_value in raw.items():
        name, _, hostname = text(raw_field).partition(SEP)
        try:
            entry = json.loads(text(raw_value))
            at = float(entry.pop("at"))
            default = bool(entry.pop("default", False))
        except (ValueError, KeyError, TypeError):
            stale.append(text(raw_field))
            continue
        if now - at > keep:
            stale.append(text(raw_field))
            continue
        workers.setdefault(name, []).append(Worker(hostname, str(entry.get("version", "")), at))
        if name not in newest or at > newest[name][0]:
            newest[name] = (at, entry, default)
    out = [
        Published(name, summary, default, tuple(sorted(workers[name], key=lambda w: w.hostname)))
        for name, (_, summary, default) in newest.items()
    ]
    out.sort(key=lambda p: (not p.default, p.name))
    return out, stale


def read(client: redis.Redis, now: float, keep: float) -> list[Published]:
    """The agents the fleet serves now (a worker seen within `keep` seconds serves each)."""
    return fold(client.hgetall(keys.AGENTS), now, keep)[0]


def forget(client: redis.Redis, fields: Iterable[str]) -> None:
    """Drop published entries no worker has renewed within the wait (a worker gone, an agent removed)."""
    listed = list(fields)
    if listed:
        client.hdel(keys.AGENTS, *listed)
