"""A turn's cost in Redis commands, counted by MONITOR on a real redis-server: the guard issue #41 asked for.

Turns of one tool round, one after another (each sent and waited for by the client, as a user's code would), on one
worker at -c 1 whose tool does no I/O (`bench.tools:peek`), the real anthropic SDK against the fake Messages API.
Every command Redis runs meanwhile is counted, in two kinds: those a client sent (each command of a pipeline: what
round trips are made of, the worker's and the client's) and those Baton's scripts ran (what INFO commandstats counts
besides, and bench.turn_trace with it). The ceilings are this stop's counts with room for the worker's idle traffic,
so a change that adds a command or a round trip to a turn fails here, and says which command it added.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import monitor
from tests.support.fake_anthropic import text, tool_call
from tests.support.processes import wait_until

pytestmark = pytest.mark.integration

TURNS = 12
# Per turn, measured at this stop (2026-12-05): 20.0 commands sent (9 EVALSHA, 9 of kombu's for the message's
# delivery and ack, the client's XREAD and HGETALL) and 52.0 run by scripts. Since 2026-12-06 the first model call's
# preflight rides the take's round trip (tasks/store/ahead.py): 8 EVALSHA and an EXISTS sent, 51.0 run by scripts
# (the first reservation's EXISTS is sent with the take, not run by its script). The room, 0.75 a turn, is for the idle
# traffic a slow turn meets (the poller's look every 0.5 s while a unit runs, the sweeper's pass every 2 s): one
# command more in every turn is more than that. The task events' PUBLISH is left out: Celery's buffer is flushed by
# a 0.1 s timer (tasks/runtime/task_events.py), so their count follows the machine's speed, not the turn's work.
# Since stop 55 the rate gate counts each attempt it admits while the endpoint has said nothing of its limits (an
# HINCRBY an attempt: the first answer of a window then knows what else is on its way, tasks/store/rate_limits.py):
# 53.0 run by scripts. Since stop 57 the take's script no longer reads the transcript (each message went through
# Lua): an LRANGE sent right behind it in the same round trip does (tasks/store/take.py), 21.0 sent and 52.0 run by
# scripts. Stop 59's closing CI counted 22.0 sent: kombu's upkeep of its binding tables (7 commands sent, 5 run by its
# scripts, on a timer of the worker's main process) fell in the window with a poller's look, a new pooled connection's
# HELLO and PING and a BRPOP; the broker's upkeep is now left out as the task events are (`monitor.broker_upkeep`).
# Stop 66's suite under two busy loops counted 21.92 sent: the turns took longer, so 2 of the poller's looks and 4 of
# the sweeper's index scans fell in the window; the worker's timed looks are left out too (`monitor.timed_looks`):
# 21.0 and 21.25 under three busy loops after it, 21.0 on a quiet machine.
SENT_CEILING = 21.75
SCRIPTED_CEILING = 52.75
TIMED = {"PUBLISH"}


@pytest.fixture
def counted(stack) -> Iterator[Any]:
    stack.env["BATON_TOOLS"] = "bench.tools:TOOLS"  # a tool with no I/O: the counts are Baton's own
    stack.fake_api.set_handler(
        lambda body, index: tool_call("peek", {"key": "a"}) if index % 2 == 0 else text("The answer is A.")
    )
    stack.worker(concurrency=1)
    yield stack


def test_a_turn_of_one_tool_round_stays_under_its_redis_command_ceilings(counted):
    client = counted.client()
    assert client.wait(client.send_message("warm", "what is a?"), timeout=60).status == "completed"
    probe, address = monitor.probe(counted.redis_server.url)  # its own looks are left out of the count

    def acked() -> None:
        # A turn's ack (acks_late) comes after its settle, which is what the client's wait returns on: the window
        # opens and closes with no message unacknowledged, so it holds every turn's ack and no other.
        wait_until(lambda: probe.hlen("unacked") == 0, 30, what="the worker's ack of the last turn")

    watching = monitor.Monitor(counted.redis_server.url, address)
    try:
        acked()
        probe.echo(monitor.START)
        for i in range(TURNS):
            result = client.wait(client.send_message(f"guard-{i}", "what is a?"), timeout=60)
            assert result.status == "completed" and result.reply == "The answer is A."
        acked()
        probe.echo(monitor.END)
    finally:
        watching.close()
    last = counted.fake_api.requests[-1]["messages"][-1]["content"][0]
    assert last["type"] == "tool_result" and "value-of-a" in str(last["content"])  # the round ran the no-I/O tool
    sent, scripted = monitor.by_kind(watching.seen, leave_out=TIMED)
    assert sum(sent.values()) / TURNS <= SENT_CEILING, f"sent per turn: {monitor.shown(sent, TURNS)}"
    assert sum(scripted.values()) / TURNS <= SCRIPTED_CEILING, f"run by scripts: {monitor.shown(scripted, TURNS)}"
