"""Load: 200 chat turns across 50 chats on two workers; every turn completes, in order per chat, and Redis lets go.

    python -m bench.load [--turns 200] [--chats 50]

Scripted provider (`BATON_PROVIDER=scripted`), one tool round per turn (`tool:lookup{"key":...}`). A chat's turns
are all sent at once, so each chat queues its turns and they must run one at a time, in the order sent: the
order each chat's turns ended is read back from its events. Redis memory (`INFO memory` used_memory) is sampled
before the load, at its peak and after everything settled and the short TTLs (`BATON_LEASE_TTL=3`,
`BATON_ROUND_TTL=5`) ran out; the keys left are listed by prefix, split into those kept by design (transcripts,
events, records, turn lists, Celery results for `result_expires`) and those that must be gone (leases, journals,
stop flags, round slots, chat queues, recovery locks, active/pending-set entries, unacked broker messages).
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from collections import Counter, defaultdict

import redis

from bench._common import Row, Stack, command_counts, delta, fmt, judge, median, print_rows
from tasks.store import indexes, keys

TTL_ENV = {"BATON_LEASE_TTL": "3", "BATON_ROUND_TTL": "5"}
SETTLE_SECONDS = 20.0  # longer than every short TTL above, the 3 s recovery lock and the lost-message sweep's period

# Keys that may stay: Baton keeps transcripts, events, records and turn lists; Celery keeps results for
# `result_expires`; kombu keeps its bindings; the counting tools keep their counts.
KEPT = ("transcript", "events", "rec", "turns", "celery-task-meta", "_kombu.binding", "test:calls", "scripted")
# Keys that must be gone once every turn ended.
GONE = ("lease", "journal", "stop", "round", "queue", "recover", "active", "pending", "unacked", "drain")


def prefix_of(key: str) -> str:
    """A key with its ids wildcarded: `baton:{chat:*}:rec:*`, `celery-task-meta-*`, ..."""
    key = re.sub(r"\{(chat|run):[^}]*\}", r"{\1:*}", key)
    key = re.sub(r"(:rec:|:journal:)[^:]+", r"\1*", key)
    key = re.sub(r"celery-task-meta-.*", "celery-task-meta-*", key)
    key = re.sub(r"(test:calls:).*", r"\1*", key)
    return re.sub(r"(:journal:\*):\d+$", r"\1:*", key)


def classify(prefix: str) -> str:
    if any(part in prefix for part in GONE):
        return "must be gone"
    if any(part in prefix for part in KEPT):
        return "kept by design"
    return "other"


def key_census(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Keys by prefix: (count, bytes by MEMORY USAGE)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for raw in client.scan_iter(count=1000):
        key = raw.decode()
        entry = out[prefix_of(key)]
        entry[0] += 1
        entry[1] += int(client.memory_usage(raw) or 0)
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


PARTS = ("used_memory_dataset", "used_memory_overhead", "mem_clients_normal", "used_memory_scripts")


def memory_parts(client: redis.Redis) -> dict[str, int]:
    """Where used_memory goes: the dataset, its overhead (keyspace tables, clients, scripts, ...)."""
    info = client.info("memory")
    return {part: int(info.get(part, 0)) for part in PARTS}


def main(turns: int = 200, chats: int = 50) -> tuple[list[Row], bool]:
    ok = True
    with Stack("load", **TTL_ENV) as stack:
        stack.worker("w1", concurrency=2)
        stack.worker("w2", concurrency=2)
        client = stack.client()
        r = stack.redis()
        time.sleep(1.0)  # let both workers settle their connections before the baseline
        baseline = used_memory(r)
        baseline_parts = memory_parts(r)
        before = command_counts(r)
        peak = [baseline]
        done = threading.Event()

        def sample_peak() -> None:
            while not done.wait(0.1):
                peak.append(used_memory(r))

        sampler = threading.Thread(target=sample_peak, daemon=True)
        sampler.start()
        prefix = f"load{int(time.time())}"
        sent: dict[str, list[str]] = defaultdict(list)
        started = time.perf_counter()
        for i in range(turns):
            chat_id = f"{prefix}-{i % chats}"
            ref = client.send_message(chat_id, f'turn {i // chats}: tool:lookup{{"key":"{chat_id}-{i // chats}"}}')
            sent[chat_id].append(ref.turn_id)
        deadline = time.monotonic() + 300
        pending = {(chat, turn) for chat, ids in sent.items() for turn in ids}
        while pending and time.monotonic() < deadline:
            pending = {(c, t) for c, t in pending if client.turn(c, t).status not in ("completed", "failed", "stopped")}
            if pending:
                time.sleep(0.2)
        elapsed = time.perf_counter() - started
        done.set()
        sampler.join(timeout=2)
        after_load = command_counts(r)

        statuses: Counter[str] = Counter()
        out_of_order: list[str] = []
        latencies: list[float] = []
        for chat_id, ids in sent.items():
            for turn_id in ids:
                statuses[client.turn(chat_id, turn_id).status] += 1
            events = client.events(chat_id)
            queued = {e.model_extra["turn_id"]: e.at for e in events if e.type == "turn.queued"}
            ended = [e for e in events if e.type in ("turn.completed", "turn.failed", "turn.stopped")]
            latencies += [e.at - queued[e.model_extra["turn_id"]] for e in ended if e.model_extra["turn_id"] in queued]
            order = [e.model_extra["turn_id"] for e in ended]
            if order != ids:
                out_of_order.append(f"{chat_id}: sent {ids}, ended {order}")
        lookups = int(r.get("test:calls:lookup") or 0)

        time.sleep(SETTLE_SECONDS)  # the short TTLs run out; the sweeps have forgotten the finished owners
        final = used_memory(r)
        final_parts = memory_parts(r)
        census = key_census(r)
        active = indexes.count(r, keys.ACTIVE)
        # Drop what this load left by design (as its retention would), and memory must come back to baseline.
        for raw in r.scan_iter(count=1000):
            name = prefix_of(raw.decode())
            if classify(name) == "kept by design" and not name.startswith("_kombu"):
                r.delete(raw)
        time.sleep(0.5)
        emptied = used_memory(r)
        emptied_parts = memory_parts(r)

    completed = statuses["completed"]
    by_class: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for name, (count, size) in census.items():
        by_class[classify(name)].append((name, count, size))
    kept_bytes = sum(size for _, _, size in by_class["kept by design"])
    leftover = by_class["must be gone"]
    residual = emptied - baseline
    dataset_residual = emptied_parts["used_memory_dataset"] - baseline_parts["used_memory_dataset"]
    clients_growth = emptied_parts["mem_clients_normal"] - baseline_parts["mem_clients_normal"]
    calls = delta(after_load, before)
    per_turn = sum(calls.values()) / max(1, turns)

    print(f"  {turns} turns over {chats} chats on 2 workers in {elapsed:.1f}s ({turns / elapsed:.1f} turns/s); "
          f"outcomes {dict(statuses)}; lookups run {lookups}", flush=True)
    print(f"  turn latency queued->ended p50 {fmt(median(latencies))}s, max {fmt(max(latencies))}s; "
          f"Redis commands per turn {per_turn:.0f} (evalsha {calls.get('evalsha', 0) / turns:.1f})", flush=True)
    print(f"  used_memory: baseline {baseline / 1024:.0f} KiB, peak {max(peak) / 1024:.0f} KiB, after settling "
          f"{final / 1024:.0f} KiB, of which kept-by-design keys {kept_bytes / 1024:.0f} KiB; with those deleted "
          f"{emptied / 1024:.0f} KiB ({residual / 1024:+.0f} KiB from baseline)", flush=True)
    for label, parts in (("baseline", baseline_parts), ("settled", final_parts), ("emptied", emptied_parts)):
        print(f"    {label}: " + ", ".join(f"{k.removeprefix('used_memory_')} {v / 1024:.0f} KiB" for k, v in
                                             parts.items()), flush=True)
    print("  keys left, by prefix:", flush=True)
    for group in ("kept by design", "must be gone", "other"):
        for name, count, size in by_class.get(group, []):
            print(f"    [{group}] {name}: {count} keys, {size / 1024:.1f} KiB", flush=True)
    if leftover or active or dataset_residual > 64 * 1024:
        ok = False
        print(f"  LEFTOVER: {leftover} active={active}", flush=True)
    for line in out_of_order[:10]:
        ok = False
        print(f"  OUT OF ORDER: {line}", flush=True)
    if completed != turns or lookups != turns:
        ok = False
        print(f"  NOT ALL COMPLETED ONCE: {completed}/{turns} completed, {lookups} lookups", flush=True)
    rows = [
        Row("turns completed", completed, f"of {turns}", f"= {turns}", "meets" if completed == turns else "misses"),
        Row("chats out of order", len(out_of_order), "chats", "= 0", judge(len(out_of_order), at_most=0)),
        Row("throughput", turns / elapsed, "turns/s", "—", "info"),
        Row("keys that must be gone, left", sum(c for _, c, _ in leftover) + active, "keys", "= 0",
            judge(sum(c for _, c, _ in leftover) + active, at_most=0)),
        Row("used_memory after settling, kept-by-design keys deleted, minus baseline", residual / 1024, "KiB",
            "—", "info"),
        Row("  of which the dataset (keys and values)", dataset_residual / 1024, "KiB", "≤ 64 KiB",
            judge(dataset_residual / 1024, at_most=64)),
        Row("  of which client connection buffers (the workers' pools grew)", clients_growth / 1024, "KiB", "—",
            "info"),
    ]
    return rows, ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--chats", type=int, default=50)
    args = parser.parse_args()
    rows, ok = main(args.turns, args.chats)
    print_rows(rows)
    sys.exit(0 if ok else 1)
