"""Redis commands per tool round and per journaled step, from `INFO commandstats` deltas.

Through a real worker (scripted provider, instant; the no-I/O `bench.tools:peek` tool so the tool
itself issues no Redis command): turns with 0 tool rounds against turns with 3. What the bench process
itself sends is taken out: its status polls are counted one by one, the cost of `send_message` is
measured on a queue no worker reads, and the worker's idle traffic (broker polling, heartbeats,
the recovery sweep) is measured over a quiet window and subtracted pro rata.

In-process: one `RedisJournal.record` under a real lease and fence, counted and timed next to PING.

On the side: keyspace notifications on the round slots (`baton:{chat:*}:round`) during all the
successful turns; a successful turn should never write its chat's round slot. A control write at the
end proves the subscription sees writes when there are some.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from agent.loop.edge import EventDraft
from bench._common import Row, Stack, command_counts, delta, fmt, judge, median, print_rows
from tasks.client import Client
from tasks.store import keys
from tasks.store.fenced import Fence
from tasks.store.journal import RedisJournal
from tasks.store.lease import Lease, new_token

K = 20  # turns per arm
SLOW_TURNS = 4
SLOW_SECONDS = 3.0
TOOL_TEXT = " ".join(f'tool:peek{{"key":"k{i}"}}' for i in range(3))
PLAIN_TEXT = "hello, no tools please"
FENCED = ("evalsha", "eval")
ROUND_PATTERN = "__keyspace@0__:baton:{chat:*}:round"
TERMINAL = {b'"completed"', b'"failed"', b'"stopped"'}

Check = Callable[[], bool]


@dataclass(frozen=True)
class Measure:
    commands: dict[str, int]
    seconds: float
    polls: int

    @property
    def total(self) -> int:
        return sum(self.commands.values())


def measure(r: redis.Redis, start: Callable[[], list[Check]]) -> Measure:
    """Command deltas while `start()` enqueues work and its checks (one command each) report it done."""
    before = command_counts(r)
    started = time.perf_counter()
    checks = start()
    polls = 0
    deadline = time.monotonic() + 30
    for check in checks:
        while True:
            polls += 1
            if check():
                break
            if time.monotonic() > deadline:
                raise TimeoutError("benchmark work did not finish within 30 s")
            time.sleep(0.005)
    seconds = time.perf_counter() - started
    return Measure(delta(command_counts(r), before), seconds, polls)


def turn_done(r: redis.Redis, chat_id: str, turn_id: str) -> Check:
    key = keys.record(keys.owner("chat", chat_id), turn_id)

    def check() -> bool:
        status = r.hget(key, "status")
        if status in TERMINAL and status != b'"completed"':
            raise RuntimeError(f"turn {chat_id}/{turn_id} ended {status!r}")
        return status == b'"completed"'

    return check


def send_turns(client: Client, r: redis.Redis, prefix: str, text: str, k: int) -> Callable[[], list[Check]]:
    def start() -> list[Check]:
        refs = [client.send_message(f"{prefix}-{i}", text) for i in range(k)]
        return [turn_done(r, ref.chat_id, ref.turn_id) for ref in refs]

    return start


def only_send(start: Callable[[], list[Check]]) -> Callable[[], list[Check]]:
    """Enqueue (on a queue nobody reads) without waiting: what sending alone costs."""
    return lambda: start() and []


def send_pings(client: Client, r: redis.Redis, queue: str, k: int) -> Callable[[], list[Check]]:
    def start() -> list[Check]:
        ids = [client._celery.send_task("baton.ping", queue=queue).id for _ in range(k)]
        return [(lambda key=f"celery-task-meta-{i}": bool(r.exists(key))) for i in ids]

    return start


class CountingRedis(redis.Redis):
    """A client that counts the commands it sends: its round trips (no pipelines are used with it)."""

    sent = 0

    def execute_command(self, *args: object, **options: object) -> object:
        self.sent += 1
        return super().execute_command(*args, **options)


@dataclass(frozen=True)
class JournalFigures:
    round_trips: float  # commands this process sent per record
    server_commands: float  # commandstats calls per record, the ones run inside the Lua script included
    breakdown: dict[str, float]
    record_us: float
    ping_us: float


def journal_figures(url: str) -> JournalFigures:
    """One `RedisJournal.record` under a real lease and fence: round trips, server commands, p50 time."""
    r = CountingRedis.from_url(url)
    owner = keys.owner("chat", "bench-journal")
    lease = Lease(r, keys.lease(owner), new_token("t-bench", "bench"), ttl=120)
    if not lease.acquire():
        raise RuntimeError("could not take the benchmark lease")
    fence = Fence(r, lease.key, lease.token)
    journal = RedisJournal(r, fence, owner_id=owner, unit_id="t-bench", generation=0)
    record = {
        "kind": "tool",
        "status": "done",
        "name": "peek",
        "content": "value-of-k0",
        "is_error": False,
        "synthesized": False,
        "log_status": "ok",
    }
    event: EventDraft = (
        "tool.result",
        {"turn_id": "t-bench", "tool_use_id": "toolu_x", "name": "peek", "status": "ok", "is_error": False},
    )
    journal.record("warm", record, [event])  # loads the script into Redis's cache (NOSCRIPT once)
    n = 200
    before = command_counts(r)
    sent = r.sent
    for i in range(n):
        journal.record(f"tool:count{i}", record, [event])
    round_trips = (r.sent - sent) / n
    counted = delta(command_counts(r), before)

    record_us: list[float] = []
    ping_us: list[float] = []
    for i in range(500):
        started = time.perf_counter()
        journal.record(f"tool:time{i}", record, [event])
        record_us.append((time.perf_counter() - started) * 1e6)
        started = time.perf_counter()
        r.ping()
        ping_us.append((time.perf_counter() - started) * 1e6)
    lease.release()
    r.close()
    return JournalFigures(
        round_trips=round_trips,
        server_commands=sum(counted.values()) / n,
        breakdown={k: round(v / n, 2) for k, v in counted.items()},
        record_us=median(record_us),
        ping_us=median(ping_us),
    )


def main(k: int = K) -> list[Row]:
    with Stack("roundtrips", BATON_TOOLS="bench.tools:TOOLS") as stack:
        r = stack.redis()
        journal = journal_figures(stack.url)

        r.config_set("notify-keyspace-events", "KEA")
        sub = stack.redis().pubsub(ignore_subscribe_messages=True)
        sub.psubscribe(ROUND_PATTERN)

        stack.worker("w1", concurrency=2)
        client = stack.client()
        nowhere = stack.client(BATON_QUEUE=f"{stack.queue}-nowhere")
        stamp = int(time.time())

        # Warm-up: scripts cached in Redis, modules imported in both pool children, queues declared.
        measure(r, send_turns(client, r, f"warm0-{stamp}", PLAIN_TEXT, 4))
        measure(r, send_turns(client, r, f"warm3-{stamp}", TOOL_TEXT, 4))
        measure(r, send_pings(client, r, stack.queue, 4))
        measure(r, only_send(send_turns(nowhere, r, f"warmsend-{stamp}", PLAIN_TEXT, 2)))
        measure(r, only_send(send_pings(nowhere, r, nowhere.settings.queue, 2)))

        before = command_counts(r)
        time.sleep(3.0)
        idle = delta(command_counts(r), before)
        idle_rate = sum(idle.values()) / 3.0

        send_turn_cost = measure(r, only_send(send_turns(nowhere, r, f"send-{stamp}", PLAIN_TEXT, k)))
        send_ping_cost = measure(r, only_send(send_pings(nowhere, r, nowhere.settings.queue, k)))
        zero = measure(r, send_turns(client, r, f"r0-{stamp}", PLAIN_TEXT, k))
        three = measure(r, send_turns(client, r, f"r3-{stamp}", TOOL_TEXT, k))
        pings = measure(r, send_pings(client, r, stack.queue, k))
        # Turns that wait on their provider: what the watcher's beat (stop/drain looks, lease renewals) adds.
        slow = measure(r, send_turns(client, r, f"slow-{stamp}", f"slow:{SLOW_SECONDS:g} {PLAIN_TEXT}", SLOW_TURNS))

        def worker_side(m: Measure, send: Measure) -> float:
            """Commands per unit caused by the worker: minus our polls, our sends and idle traffic."""
            sends = send.total - idle_rate * send.seconds
            return (m.total - m.polls - sends - idle_rate * m.seconds) / k

        per_turn0 = worker_side(zero, send_turn_cost)
        sends_per_turn = (send_turn_cost.total - idle_rate * send_turn_cost.seconds) / k
        per_slow = (slow.total - slow.polls - idle_rate * slow.seconds) / SLOW_TURNS - sends_per_turn
        beat_per_s = (per_slow - per_turn0) / SLOW_SECONDS
        per_turn3 = worker_side(three, send_turn_cost)
        per_ping = worker_side(pings, send_ping_cost)
        per_round = (per_turn3 - per_turn0) / 3
        idle_fenced = sum(idle.get(c, 0) for c in FENCED) / 3.0  # kombu's restore lock is Lua too
        fenced0 = (sum(zero.commands.get(c, 0) for c in FENCED) - idle_fenced * zero.seconds) / k
        fenced3 = (sum(three.commands.get(c, 0) for c in FENCED) - idle_fenced * three.seconds) / k
        fenced_per_round = (fenced3 - fenced0) / 3
        by_command = {
            c: round((three.commands.get(c, 0) - zero.commands.get(c, 0)) / (3 * k), 2)
            for c in sorted(set(three.commands) | set(zero.commands))
            if three.commands.get(c, 0) != zero.commands.get(c, 0)
        }

        # Per turn with no tool round, by command: the worker's share (our sends, our status polls, which are
        # HGETs, and the idle traffic taken out as above).
        per_turn0_by_command = {
            c: round(v, 2)
            for c in sorted(zero.commands)
            if abs(
                v := (
                    zero.commands.get(c, 0)
                    - send_turn_cost.commands.get(c, 0)
                    - (zero.polls if c == "hget" else 0)
                    - idle.get(c, 0) / 3.0 * (zero.seconds + send_turn_cost.seconds)
                )
                / k
            )
            >= 0.05
        }

        round_writes = _drain(sub)
        r.set(keys.round_slot(keys.owner("chat", "bench-control")), "x", px=60_000)
        control = _drain(sub)
        sub.close()
        successful_turns = 2 * k + 8

    print(f"  idle traffic {fmt(idle_rate)} commands/s: {json.dumps(idle)}", flush=True)
    print(f"  worker commands per turn: 0 rounds {fmt(per_turn0)}, 3 rounds {fmt(per_turn3)}; "
          f"per bare ping {fmt(per_ping)}", flush=True)
    print(f"  per tool round, by command: {json.dumps(by_command)}", flush=True)
    print(f"  per turn with 0 tool rounds, by command: {json.dumps(per_turn0_by_command)}", flush=True)
    print(f"  EVALSHA per turn (the fenced writes and the execution's take): 0 rounds {fmt(fenced0)}, "
          f"3 rounds {fmt(fenced3)}", flush=True)
    print(f"  a turn waiting {SLOW_SECONDS:g} s on its provider: {fmt(per_slow)} commands; the watcher's beat "
          f"{fmt(beat_per_s)} commands per second of waiting", flush=True)
    print(f"  one RedisJournal.record: {fmt(journal.round_trips)} round trip(s); server-side commands "
          f"{json.dumps(journal.breakdown)} (commandstats counts the commands run inside a Lua script)", flush=True)
    print(f"  round-slot notifications: {round_writes or 'none'}; control write seen: {control}", flush=True)
    if not control:
        raise RuntimeError("the keyspace subscription saw no control write: the round-slot count means nothing")
    # Each fenced write of a tool round is one journaled step; the commands it runs inside Lua are no round trip.
    trips_per_round = per_round - fenced_per_round * (journal.server_commands - journal.round_trips)
    return [
        Row("Redis commands per tool round (worker, commandstats)", per_round, "commands", "—", "info"),
        Row("  of which round trips (the rest run inside the fenced Lua writes)", trips_per_round, "commands", "—",
            "info"),
        Row("fenced writes (EVALSHA) per tool round", fenced_per_round, "writes", "≤ 2", judge(fenced_per_round,
                                                                                                  at_most=2)),
        Row("Redis commands per turn, 0 tool rounds (worker)", per_turn0, "commands", "—", "info"),
        Row("Redis commands per bare ping (worker)", per_ping, "commands", "—", "info"),
        Row("Redis commands per turn, 0 tool rounds ÷ bare ping", per_turn0 / per_ping, "x", "—", "info"),
        Row("watcher beat while a turn waits on its provider", beat_per_s, "commands/s", "—", "info"),
        Row("Redis round trips per journaled step (RedisJournal.record)", journal.round_trips, "round trips", "1",
            judge(journal.round_trips, at_most=1)),
        Row("  server-side commands per journaled step (EVALSHA + inside it)", journal.server_commands, "commands",
            "—", "info"),
        Row(f"round-slot writes during {successful_turns} successful turns", float(len(round_writes)), "writes", "0",
            judge(len(round_writes), at_most=0)),
        Row("journaled step cost, RedisJournal.record (p50)", journal.record_us, "µs", "—", "info"),
        Row("bare Redis round trip, PING (p50)", journal.ping_us, "µs", "—", "info"),
        Row("journaled step ÷ PING", journal.record_us / journal.ping_us, "x", "—", "info"),
    ]


def _drain(sub: redis.client.PubSub) -> list[str]:
    """Every keyspace notification received so far, as `key: event`."""
    seen: list[str] = []
    quiet = 0
    while quiet < 2:
        message = sub.get_message(timeout=0.2)
        if message is None:
            quiet += 1
            continue
        channel = message["channel"].decode().removeprefix("__keyspace@0__:")
        seen.append(f"{channel}: {message['data'].decode()}")
    return seen


if __name__ == "__main__":
    print_rows(main())
