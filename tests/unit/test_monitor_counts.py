"""tests/support/monitor.py's tally: the broker's upkeep of its binding tables is left out of a turn's count, and
nothing of the turn's own (kombu's ack, Baton's scripts) goes with it. The feed is the one stop 59's CI counted, cut
down: kombu's refresh of the pidbox binding (a script in a transaction, redis-py's SCRIPT EXISTS before it) and its
sweep (NOSCRIPT, SCRIPT LOAD, the script again), between a turn's ack and its next message."""

from __future__ import annotations

from typing import Any

from tests.support import monitor


def _sent(port: int, command: str) -> dict[str, Any]:
    return {"client_type": "tcp", "client_address": "127.0.0.1", "client_port": str(port), "command": command}


def _ran(command: str) -> dict[str, Any]:
    return {"client_type": "lua", "client_address": "lua", "client_port": "", "command": command}


FEED = [
    _sent(1, "MULTI"),  # the turn's ack (kombu, acks_late)
    _sent(1, "ZREM unacked_index 4867"),
    _sent(2, "SCRIPT EXISTS ef7a"),  # kombu's refresh, on its own connection
    _sent(2, "MULTI"),
    _sent(1, "HDEL unacked 4867"),
    _sent(2, "EVALSHA ef7a 2 _kombu.binding.celery.pidbox _kombu.binding_deadlines w1 celery.pidbox 36000"),
    _ran("SADD _kombu.binding.celery.pidbox w1"),
    _ran("ZADD _kombu.binding_deadlines GT 1796599904589 celery.pidbox"),
    _sent(1, "EXEC"),
    _sent(2, "EXEC"),
    _sent(2, "EVALSHA 9a2b 1 _kombu.binding_deadlines _kombu.binding. _kombu.binding_permanent. 100"),  # NOSCRIPT
    _sent(2, "SCRIPT LOAD local now = redis.call('TIME')"),
    _sent(2, "EVALSHA 9a2b 1 _kombu.binding_deadlines _kombu.binding. _kombu.binding_permanent. 100"),
    _ran("ZRANGEBYSCORE _kombu.binding_deadlines -inf 1796596304590 LIMIT 0 100"),
    _sent(3, "EVALSHA 39e2 3 baton:{chat:c}:lease baton:{chat:c}:events t|w1"),  # the next turn's take
    _ran("SET baton:{chat:c}:lease t|w1"),
]


def test_the_brokers_binding_upkeep_is_left_out_and_the_turns_own_commands_kept():
    sent, scripted = monitor.by_kind(FEED)
    assert sent == {"MULTI": 1, "ZREM": 1, "HDEL": 1, "EXEC": 1, "EVALSHA": 1}
    assert scripted == {"SET": 1}
