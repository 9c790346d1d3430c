"""Throughput of ONE worker (concurrency 2): chat turns per second next to bare `baton.ping` tasks per second.

200 turns across 50 chats (scripted provider, one `lookup` tool round each) against 200 pings through
the same worker. The machine is shared, so the two kinds are measured in alternating blocks (turn N of
all 50 chats, then 50 pings, four times) and each kind's block times are summed: a load swing from
other processes hits both alike. A block is timed from its first send to its last completion, sending
as fast as the client can. Each chat's turns must complete in the order they were sent (checked from
its `turn.completed` events).

For context, a bursty pattern rides along in the same rotation: 12 chats per block send their 4 turns
back to back (48 chats, 192 turns in all), so a chat's next turn is queued while the one before it runs
and has to wait for it.
"""

from __future__ import annotations

import time

from bench._common import Row, Stack, fmt, judge, ping, print_rows
from tasks.client import Client
from tasks.store.records import TurnRef

TURNS = 200
CHATS = 50
BURST_CHATS_PER_BLOCK = 12
TEXT = 'tool:lookup{"key":"a"}'


def send_and_wait(client: Client, order: list[str], sent: dict[str, list[TurnRef]]) -> tuple[float, int]:
    """Send one turn per entry of `order` (a chat id), then wait for all; (seconds, turns not completed)."""
    started = time.perf_counter()
    refs = [client.send_message(chat_id, TEXT) for chat_id in order]
    failed = sum(1 for ref in refs if client.wait(ref, timeout=60).status != "completed")
    seconds = time.perf_counter() - started
    for ref in refs:
        sent.setdefault(ref.chat_id, []).append(ref)
    return seconds, failed


def ping_block(client: Client, queue: str, n: int) -> float:
    started = time.perf_counter()
    results = [client._celery.send_task("baton.ping", queue=queue) for _ in range(n)]
    for result in results:
        result.get(timeout=60)
    return time.perf_counter() - started


def out_of_order(client: Client, sent: dict[str, list[TurnRef]]) -> int:
    """Chats whose `turn.completed` events are not in send order."""
    bad = 0
    for chat_id, refs in sent.items():
        done = [(e.model_extra or {}).get("turn_id") for e in client.events(chat_id) if e.type == "turn.completed"]
        bad += done != [ref.turn_id for ref in refs]
    return bad


def main(turns: int = TURNS, chats: int = CHATS) -> list[Row]:
    per_chat = turns // chats
    with Stack("throughput") as stack:
        stack.worker("w1", concurrency=2)
        client = stack.client()
        stamp = int(time.time())
        for i in range(4):  # warm-up: both pool children import and connect
            client.wait(client.send_message(f"warm-{stamp}-{i}", TEXT), timeout=30)
            ping(client, stack.queue)

        steady_chats = [f"tp-{stamp}-{c}" for c in range(chats)]
        steady: dict[str, list[TurnRef]] = {}
        bursty: dict[str, list[TurnRef]] = {}
        steady_s = ping_s = burst_s = 0.0
        failed = burst_failed = burst_turns = 0
        for block in range(per_chat):
            seconds, lost = send_and_wait(client, steady_chats, steady)
            steady_s, failed = steady_s + seconds, failed + lost
            ping_s += ping_block(client, stack.queue, chats)
            burst_chats = [f"tb-{stamp}-{block}-{c}" for c in range(BURST_CHATS_PER_BLOCK)]
            order = [chat for chat in burst_chats for _ in range(per_chat)]
            seconds, lost = send_and_wait(client, order, bursty)
            burst_s, burst_failed, burst_turns = burst_s + seconds, burst_failed + lost, burst_turns + len(order)
        disorder = out_of_order(client, steady) + out_of_order(client, bursty)

    n_turns = chats * per_chat
    turns_per_s = n_turns / steady_s
    pings_per_s = n_turns / ping_s
    burst_per_s = burst_turns / burst_s
    ratio = turns_per_s / pings_per_s
    not_completed = failed + burst_failed
    print(f"  {n_turns} turns in {fmt(steady_s)} s, {n_turns} pings in {fmt(ping_s)} s, {burst_turns} bursty turns in "
          f"{fmt(burst_s)} s; {not_completed} not completed, {disorder} chats out of order", flush=True)
    return [
        Row("chat turns per second, 1 worker x 2 (1 tool round)", turns_per_s, "turns/s", "—", "info"),
        Row("bare baton.ping per second, same worker", pings_per_s, "tasks/s", "—", "info"),
        Row("turns/s ÷ pings/s", ratio, "x", "≥ 0.5", judge(ratio, at_least=0.5)),
        Row("chat turns per second, each chat's 4 turns sent back to back", burst_per_s, "turns/s", "—",
            f"info ({fmt(burst_per_s / pings_per_s)}x pings)"),
        Row(f"chats whose turns completed out of send order (of {len(steady) + len(bursty)})", float(disorder),
            "chats", "0", judge(disorder, at_most=0)),
        Row(f"turns not completed (of {n_turns + burst_turns})", float(not_completed), "turns", "0",
            judge(not_completed, at_most=0)),
    ]


if __name__ == "__main__":
    print_rows(main())
