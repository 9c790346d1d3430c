"""Counting the round trips a thread sends through a redis-py client: each command by its name, each pipeline (and
calls sent straight on a held connection, tasks/store/direct.py) as its commands' names joined by `+`, calls sent
ahead (their replies read later) as their names joined by `+` and ` ahead` (a write sent ahead: `EVALSHA ahead`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def count_round_trips(store: Any, monkeypatch: Any, before: Callable[[str], None] = lambda sending: None) -> list[str]:
    """The round trips the calling thread sends from here on: each command by its name, each pipeline as its
    commands' names joined by `+`, calls sent ahead (their replies read later) as their names joined by `+` and
    ` ahead` (`before(that)` runs just before it goes). Other threads' are not counted (the live text writer's, the
    poller's)."""
    from tasks.store import direct

    me = threading.get_ident()
    trips: list[str] = []
    command, pipeline, ahead, straight = store.execute_command, store.pipeline, direct.InFlight.send, direct.straight
    within = threading.local()  # in a straight call, whose calls InFlight sends in the same trip, not ahead

    def counted_ahead(client: Any, calls: Any) -> Any:
        if threading.get_ident() == me and not getattr(within, "straight", False):
            trips.append("+".join(str(call.command[0]) for call in calls) + " ahead")
            before(trips[-1])
        return ahead(client, calls)

    def counted_straight(client: Any, calls: Any) -> Any:
        if threading.get_ident() == me and direct._pool(client, calls[0].key) is not None:
            trips.append("+".join(str(call.command[0]) for call in calls))
            before(trips[-1])
        within.straight = True
        try:
            return straight(client, calls)
        finally:
            within.straight = False

    monkeypatch.setattr(direct.InFlight, "send", counted_ahead)
    monkeypatch.setattr(direct, "straight", counted_straight)

    def counting(*args: Any, **options: Any) -> Any:
        if threading.get_ident() == me:
            trips.append(str(args[0]))
            before(trips[-1])
        return command(*args, **options)

    def counted_pipeline(*args: Any, **options: Any) -> Any:
        pipe = pipeline(*args, **options)
        execute = pipe.execute

        def sent(*a: Any, **k: Any) -> Any:
            if threading.get_ident() == me:
                trips.append("+".join(str(c[0][0]) for c in pipe.command_stack))
                before(trips[-1])
            return execute(*a, **k)

        pipe.execute = sent
        return pipe

    store.execute_command, store.pipeline = counting, counted_pipeline
    return trips


def through_client(client: Any) -> list[str]:
    """The commands that go through `client.execute_command` from here on (redis-py's own way, not straight on a
    held connection), by name, whatever the thread."""
    sent: list[str] = []
    command = client.execute_command

    def counting(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]))
        return command(*args, **options)

    client.execute_command = counting
    return sent
