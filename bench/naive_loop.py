"""Baton's chat turn next to the loop a user would write in thirty lines (`bench.naive_app`), in one run.

Both sides on the same private Redis (broker, backend and state) and the same fake Messages API over HTTP
(keeping connections alive, as the real API does: a client that opened one per request would pay a TLS handshake
per request in production, and the table counts the connections each side opens), each through its own real
worker (`-c 2 -l info`, its own queue), each turn one tool round (`peek`, no I/O) and then an answer. The naive
loop is the one issue #41 describes, as a user would write it to show live text: the SDK's `messages.stream(...)`
and `get_final_message()`, an `acks_late` task, the client cached per process. Baton streams too (live text) and
keeps every safeguard on: journal, ledger, lease and heartbeat, events, repair, budgets and the rate gate.

- Latency: turns one at a time, the two sides alternating so machine noise hits both alike, with nothing else
  running between them, as a user comparing the two workers would measure; a fresh chat per turn; timed from
  send to the result in hand (Baton: `send_message` + `wait`; naive: `send_task` + `get`). The goal's figure.
- Latency again with the two other naive loops below taking their turns between (Baton, naive, without streaming,
  made durable, in turn): each turn then finds its processes colder, after three other workers' turns instead of
  one, and Baton, which runs more code a turn, loses more to that. Information, printed beside the goal's figure;
  the two other loops' figures come from this block, against the naive loop's turns of the same block.
- A second naive worker runs the same loop without streaming (`messages.create`), as a first version would:
  reported for information (the goals are against the streaming loop).
- A third runs the streaming loop made durable as a careful user would (`bench.safe_naive_app`: a per-chat lock,
  each step journaled before the next, one write at the end): the floor any loop that loses no work pays here, so
  Baton ÷ it is what Baton's features and design cost beyond durability. Information too.
- Latency again with every model call taking 0.1 s (10 turns a side): the fixed costs next to a real model's time.
- Throughput: 80 turns on distinct chats sent as fast as the client can, then all awaited; each side in turn,
  five rounds. Baton again with each chat's 4 turns sent back to back (20 chats), whose per-chat order is checked
  from the `turn.completed` events. A ratio is the median of the rounds' ratios: a machine whose speed drifts
  over seconds (a shared VM) moves a whole round, not one side of it, and one bad round does not move the median.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import psutil
from celery import Celery

from bench._common import Row, Stack, cpu_seconds, fmt, judge, median, print_rows
from tasks.client import Client
from tests.support.fake_anthropic import Reply, text, tool_call
from tests.support.fake_rate_limit import FixedWindow
from tests.support.processes import Worker, wait_until

N = 200  # turns a side in each latency block: a median of 40 moved by 0.03x between runs of one tree
WARMUP = 5
TURNS = 80
ROUNDS = 5
PER_CHAT = 4
PROMPT = "look up key a, then answer"
MODEL_SECONDS = 0.1  # a model call's time in the last latency block: a short answer of a real model
SLOW_N = 10
HEADERS_N = 40  # turns a side with the rate-limit headers the real API sends


def one_tool_round(body: dict[str, Any], index: int) -> Reply:
    """The first request of a turn gets a `peek` call; the request carrying its result gets the answer."""
    last = (body.get("messages") or [{}])[-1]
    content = last.get("content")
    answered = isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)
    return text("done: value-of-a") if answered else tool_call("peek", {"key": "a"})


class NaiveWorker(Worker):
    """A real `celery -A bench.naive_app worker` on its own queue (otherwise like the test harness's, `pool`
    included); the env's NAIVE_APP names another app module (`bench.naive_openai_app`)."""

    def start(self, timeout: float = 30) -> Worker:
        import subprocess

        from tests.support.processes import REPO

        app = self.env.get("NAIVE_APP", "bench.naive_app")
        cmd = [sys.executable, "-m", "celery", "-A", app, "worker", "-Q", self.env["NAIVE_QUEUE"],
               "-n", self.hostname, "-c", str(self.concurrency), "-l", "info", "--without-mingle", "--without-gossip",
               *(["-P", self.pool] if self.pool else [])]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        wait_until(self._ready, timeout, what=f"worker {self.name} ready")
        return self



def naive_beside(stack: Stack, concurrency: int, *, pool: str | None = None, name: str = "naive",
                 **extra: str) -> tuple[Celery, str, NaiveWorker]:
    """The streaming naive loop's worker on `stack`'s Redis (its own queue, named after `name`), started: a client
    app, the queue and the worker (on `pool`, else Celery's default; `extra`: more of its environment, e.g.
    `NAIVE_STREAM="0"` for the loop without streaming, `NAIVE_APP` for another app)."""
    queue = f"{stack.queue}-{name}"
    env = {**stack.env, "NAIVE_REDIS_URL": stack.url, "NAIVE_QUEUE": queue, "NAIVE_STREAM": "1", **extra}
    worker = NaiveWorker(name, env, stack.tmp, concurrency=concurrency, pool=pool)
    stack.workers.append(worker)
    worker.start(timeout=60)
    app = Celery("naive-client", broker=stack.url, backend=stack.url)
    # redis-py 8 caps a pool at 100 connections unless told otherwise, and `bench.concurrency` awaits 500 results from
    # 64 threads through Celery's result backend: once in three runs that pool ran out (MaxConnectionsError).
    app.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json",
                    redis_max_connections=1024)
    return app, queue, worker


def timed_baton_turn(client: Client, chat: str, text: str = PROMPT) -> float:
    """Seconds from Baton's send to its completed result in hand (anything else fails the bench)."""
    started = time.perf_counter()
    result = client.wait(client.send_message(chat, text), timeout=30)
    if result.status != "completed":
        raise RuntimeError(f"Baton turn in {chat} ended {result.status}: {result.failure}")
    return time.perf_counter() - started


def timed_naive_turn(app: Celery, queue: str, chat: str, text: str = PROMPT) -> float:
    """Seconds from the naive loop's `send_task` to its reply in hand (one that did not use the tool fails)."""
    started = time.perf_counter()
    reply = app.send_task("naive.turn", args=[chat, text], queue=queue).get(timeout=30)
    if "value-of-a" not in reply:
        raise RuntimeError(f"naive turn in {chat} on {queue} answered {reply!r}")
    return time.perf_counter() - started

def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


PLACES = ("client", "worker main", "pool children", "redis-server")


class CpuMeter:
    """CPU seconds each process spends on one side's turns, taken around each turn (or block of turns): the client's
    (`client`: its name and clock), the worker's main process, its pool children, the redis-server. One turn at a
    time, so what a process does between turns (the other side's turns, idle polls) is left out, and a turn's latency
    is close to their sum on a machine whose cores the turn's processes take turns on."""

    def __init__(self, worker: Worker, redis_pid: int,
                 client: tuple[str, Callable[[], float]] = ("client", time.thread_time)) -> None:
        main = psutil.Process(worker.proc.pid if worker.proc is not None else 0)
        self.pids = {"worker main": [main.pid], "pool children": [child.pid for child in main.children()],
                     "redis-server": [redis_pid]}
        self.client_place, self.client_clock = client
        self.places = (self.client_place, *self.pids)
        self.spent: Counter[str] = Counter()
        self.turns = 0

    def _now(self) -> dict[str, float]:
        now = {place: sum(cpu_seconds(pid) for pid in pids) for place, pids in self.pids.items()}
        return {**now, self.client_place: self.client_clock()}

    def measure(self, run: Callable[[], float], turns: int = 1) -> float:
        before = self._now()
        took = run()
        after = self._now()
        self.spent.update({place: after[place] - before[place] for place in self.places})
        self.turns += turns
        return took

    def per_turn(self, place: str) -> float:
        return self.spent[place] / max(self.turns, 1) * 1000

    def total(self) -> float:
        return sum(self.per_turn(place) for place in self.places)


# Over the throughput blocks this process's whole CPU is counted: it holds the fake API's threads beside the client,
# alike for both sides. What a fleet pays a turn when turns come together.
WHOLE_PROCESS = ("this process (client, fake API)", time.process_time)


def main(n: int = N, turns: int = TURNS) -> list[Row]:
    with Stack("naive", handler=one_tool_round, BATON_TOOLS="bench.tools:TOOLS") as stack:
        fake = stack.fake
        assert fake is not None
        naive, naive_queue, naive_worker = naive_beside(stack, 2)
        # The same loop without streaming (`messages.create`), on a queue of its own.
        _, create_queue, _ = naive_beside(stack, 2, name="naive-create", NAIVE_STREAM="0")
        # The streaming loop made durable (`bench.safe_naive_app`), on a queue of its own.
        _, safe_queue, _ = naive_beside(stack, 2, name="naive-safe", NAIVE_APP="bench.safe_naive_app")
        baton_worker = stack.worker("w1", concurrency=2)
        client = stack.client()
        stamp = uuid.uuid4().hex[:6]

        def baton_turn(chat: str) -> float:
            return timed_baton_turn(client, chat)

        def naive_turn(chat: str, queue: str = naive_queue) -> float:
            return timed_naive_turn(naive, queue, chat)

        def naive_block(prefix: str, queue: str, count: int) -> float:
            """Seconds for `count` naive turns on distinct chats, all sent, then all awaited."""
            started = time.perf_counter()
            results = [naive.send_task("naive.turn", args=[f"{prefix}-{c}", PROMPT], queue=queue) for c in range(count)]
            for result in results:
                result.get(timeout=60)
            return time.perf_counter() - started

        for i in range(WARMUP):
            baton_turn(f"warm-b-{stamp}-{i}")
            naive_turn(f"warm-n-{stamp}-{i}")
            naive_turn(f"warm-s-{stamp}-{i}", create_queue)
            naive_turn(f"warm-d-{stamp}-{i}", safe_queue)
        baton_lat: list[float] = []
        naive_lat: list[float] = []
        create_lat: list[float] = []
        safe_lat: list[float] = []
        opened = {"baton": 0, "naive": 0}  # provider connections accepted during each side's latency turns
        assert stack.redis_server is not None and stack.redis_server.proc is not None
        cpu = {"baton": CpuMeter(baton_worker, stack.redis_server.proc.pid),
               "naive": CpuMeter(naive_worker, stack.redis_server.proc.pid)}
        for i in range(n):
            at = fake.connections
            baton_lat.append(cpu["baton"].measure(lambda: baton_turn(f"lat-b-{stamp}-{i}")))  # noqa: B023
            opened["baton"] += fake.connections - at
            at = fake.connections
            naive_lat.append(cpu["naive"].measure(lambda: naive_turn(f"lat-n-{stamp}-{i}")))  # noqa: B023
            opened["naive"] += fake.connections - at
        among: dict[str, list[float]] = {"baton": [], "naive": []}  # the same sides, four workers taking turns
        for i in range(n):
            among["baton"].append(baton_turn(f"lat4-b-{stamp}-{i}"))
            among["naive"].append(naive_turn(f"lat4-n-{stamp}-{i}"))
            create_lat.append(naive_turn(f"lat4-s-{stamp}-{i}", create_queue))
            safe_lat.append(naive_turn(f"lat4-d-{stamp}-{i}", safe_queue))

        # The same turns against a model that takes MODEL_SECONDS per call before it answers: the fixed costs of
        # both loops next to what a user waits for anyway (a sleep here is the simulated model's work).
        def slow(body: dict[str, Any], index: int) -> Reply:
            time.sleep(MODEL_SECONDS)
            return one_tool_round(body, index)

        fake.set_handler(slow)
        slow_lat: dict[str, list[float]] = {"baton": [], "naive": []}
        for i in range(SLOW_N):
            slow_lat["baton"].append(baton_turn(f"slow-b-{stamp}-{i}"))
            slow_lat["naive"].append(naive_turn(f"slow-n-{stamp}-{i}"))
        fake.set_handler(one_tool_round)

        rounds: list[dict[str, float]] = []  # turns/s of each side in each round
        burst_refs = []
        block_cpu = {"baton": CpuMeter(baton_worker, stack.redis_server.proc.pid, WHOLE_PROCESS),
                     "naive": CpuMeter(naive_worker, stack.redis_server.proc.pid, WHOLE_PROCESS)}

        def baton_block(block: int) -> float:
            started = time.perf_counter()
            refs = [client.send_message(f"tp-b-{stamp}-{block}-{c}", PROMPT) for c in range(turns)]
            done = [client.wait(ref, timeout=60).status for ref in refs]
            if set(done) != {"completed"}:
                raise RuntimeError(f"Baton throughput block ended {done}")
            return time.perf_counter() - started

        for block in range(ROUNDS):
            baton_s = block_cpu["baton"].measure(lambda: baton_block(block), turns)  # noqa: B023
            naive_s = block_cpu["naive"].measure(
                lambda: naive_block(f"tp-n-{stamp}-{block}", naive_queue, turns), turns  # noqa: B023
            )
            create_s = naive_block(f"tp-s-{stamp}-{block}", create_queue, turns)
            safe_s = naive_block(f"tp-d-{stamp}-{block}", safe_queue, turns)

            started = time.perf_counter()
            chats = [f"tb-{stamp}-{block}-{c}" for c in range(turns // PER_CHAT)]
            refs = [client.send_message(chat, PROMPT) for chat in chats for _ in range(PER_CHAT)]
            done = [client.wait(ref, timeout=60).status for ref in refs]
            burst_s = time.perf_counter() - started
            if set(done) != {"completed"}:
                raise RuntimeError(f"Baton back-to-back block ended {done}")
            burst_refs += refs
            rounds.append({"baton": turns / baton_s, "naive": turns / naive_s, "create": turns / create_s,
                           "safe": turns / safe_s, "burst": turns / burst_s})
        # Last (what the gate learns stays in the store for a minute): every answer carrying the real API's rate-limit
        # headers, under a limit nobody reaches. The fake sends none otherwise; Baton shares what they say with the
        # fleet (one write an answer) and counts each admission down against it, the naive loop ignores them.
        fake.limiter = FixedWindow(10**9, 60.0)
        said: dict[str, list[float]] = {"baton": [], "naive": []}
        for i in range(HEADERS_N):
            said["baton"].append(baton_turn(f"hdr-b-{stamp}-{i}"))
            said["naive"].append(naive_turn(f"hdr-n-{stamp}-{i}"))
        fake.limiter = None
        disorder = 0
        for chat in {ref.chat_id for ref in burst_refs}:
            sent = [ref.turn_id for ref in burst_refs if ref.chat_id == chat]
            ended = [(e.model_extra or {}).get("turn_id") for e in client.events(chat) if e.type == "turn.completed"]
            disorder += ended != sent

    b50, n50 = median(baton_lat) * 1000, median(naive_lat) * 1000
    b90, n90 = p90(baton_lat) * 1000, p90(naive_lat) * 1000
    s50 = median(create_lat) * 1000
    d50 = median(safe_lat) * 1000
    b4, n4 = median(among["baton"]) * 1000, median(among["naive"]) * 1000
    slow_b, slow_n = median(slow_lat["baton"]) * 1000, median(slow_lat["naive"]) * 1000
    said_b, said_n = median(said["baton"]) * 1000, median(said["naive"]) * 1000
    b_tps, n_tps, s_tps, burst_tps = (median([r[side] for r in rounds]) for side in ("baton", "naive", "create",
                                                                                    "burst"))
    vs_naive = [r["baton"] / r["naive"] for r in rounds]
    tp_ratio = median(vs_naive)
    vs_create = median([r["baton"] / r["create"] for r in rounds])
    burst_ratio = median([r["burst"] / r["baton"] for r in rounds])
    safe_tp = median([r["safe"] / r["naive"] for r in rounds])
    vs_safe = median([r["baton"] / r["safe"] for r in rounds])
    print(f"  latency p50: Baton {fmt(b50)} ms, naive {fmt(n50)} ms -> {fmt(b50 / n50)}x; "
          f"p90: Baton {fmt(b90)} ms, naive {fmt(n90)} ms -> {fmt(b90 / n90)}x", flush=True)
    print(f"  throughput, {turns} distinct chats, median of {ROUNDS} rounds: Baton {fmt(b_tps)}/s, "
          f"naive {fmt(n_tps)}/s -> {fmt(tp_ratio)}x (rounds: {', '.join(fmt(v) for v in vs_naive)}); "
          f"Baton back to back ({PER_CHAT} per chat) {fmt(burst_tps)}/s -> {fmt(burst_ratio)}x of distinct; "
          f"{disorder} chats out of order",
          flush=True)
    print("  CPU per turn by process, ms (the latency turns; the fake API's left out):", flush=True)
    for place in (*PLACES, "total"):
        b_ms = cpu["baton"].total() if place == "total" else cpu["baton"].per_turn(place)
        n_ms = cpu["naive"].total() if place == "total" else cpu["naive"].per_turn(place)
        print(f"    {place:<14} Baton {b_ms:6.2f}  naive {n_ms:6.2f}  {b_ms - n_ms:+6.2f}", flush=True)
    print("  CPU per turn by process, ms (the throughput blocks, turns together):", flush=True)
    for place in (*block_cpu["baton"].places, "total"):
        b_ms = block_cpu["baton"].total() if place == "total" else block_cpu["baton"].per_turn(place)
        n_ms = block_cpu["naive"].total() if place == "total" else block_cpu["naive"].per_turn(place)
        print(f"    {place:<31} Baton {b_ms:6.2f}  naive {n_ms:6.2f}  {b_ms - n_ms:+6.2f}", flush=True)
    print(f"  latency p50 with four workers taking turns: Baton {fmt(b4)} ms, naive {fmt(n4)} ms -> {fmt(b4 / n4)}x",
          flush=True)
    print(f"  naive loop without streaming (messages.create): latency p50 {fmt(s50)} ms (Baton ÷ it "
          f"{fmt(b4 / s50)}x), {fmt(s_tps)} turns/s (Baton ÷ it {fmt(vs_create)}x)", flush=True)
    print(f"  naive loop made durable (lock, journal): latency p50 {fmt(d50)} ms ({fmt(d50 / n4)}x naive; Baton ÷ "
          f"it {fmt(b4 / d50)}x), turns/s {fmt(safe_tp)}x naive (Baton ÷ it {fmt(vs_safe)}x)", flush=True)
    return [
        Row("Baton turn latency, 1 tool round (p50)", b50, "ms", "—", f"info (p90 {fmt(b90)} ms)"),
        Row("naive loop turn latency, 1 tool round, messages.stream (p50)", n50, "ms", "—",
            f"info (p90 {fmt(n90)} ms)"),
        Row("turn latency ÷ naive (p50)", b50 / n50, "x", "≤ 1.1", judge(b50 / n50, at_most=1.1)),
        Row("turn latency ÷ naive (p90)", b90 / n90, "x", "—", "info"),
        Row("turn latency ÷ naive with the two other naive loops' turns between (p50)", b4 / n4, "x", "—",
            f"info ({fmt(b4)} vs {fmt(n4)} ms)"),
        Row("provider connections opened per turn, after warm-up (the fake API keeps them alive, as the real one)",
            opened["baton"] / n, "connections", "0",
            f"{judge(opened['baton'] / n, at_most=0)} (naive {fmt(opened['naive'] / n)})"),
        Row(f"turn latency ÷ naive, model calls of {MODEL_SECONDS * 1000:g} ms (p50 of {SLOW_N})", slow_b / slow_n,
            "x", "—", f"info ({fmt(slow_b)} vs {fmt(slow_n)} ms)"),
        Row(f"turn latency ÷ naive, the API's rate-limit headers on every answer (p50 of {HEADERS_N})",
            said_b / said_n, "x", "—", f"info ({fmt(said_b)} vs {fmt(said_n)} ms)"),
        *(Row(f"CPU per turn, {place}: Baton", cpu["baton"].per_turn(place), "ms", "—",
              f"info (naive {fmt(cpu['naive'].per_turn(place))} ms)") for place in PLACES),
        Row("CPU per turn, these four processes: Baton ÷ naive",
            cpu["baton"].total() / max(cpu["naive"].total(), 1e-9),
            "x", "—", "info"),
        Row("CPU per turn over the throughput blocks (client and fake API, worker, redis-server): Baton ÷ naive",
            block_cpu["baton"].total() / max(block_cpu["naive"].total(), 1e-9), "x", "—",
            f"info ({fmt(block_cpu['baton'].total())} vs {fmt(block_cpu['naive'].total())} ms)"),
        Row("naive loop without streaming (messages.create) latency (p50)", s50, "ms", "—", "info"),
        Row("turn latency ÷ naive without streaming (p50, four workers taking turns)", b4 / s50, "x", "—", "info"),
        Row(f"Baton turns/s, {turns} distinct chats, 1 worker x 2 (median of {ROUNDS} rounds)", b_tps, "turns/s", "—",
            "info"),
        Row(f"naive turns/s, {turns} distinct chats, 1 worker x 2 (median of {ROUNDS} rounds)", n_tps, "turns/s", "—",
            "info"),
        Row("turns/s ÷ naive (median of the rounds' ratios)", tp_ratio, "x", "≥ 0.85",
            f"{judge(tp_ratio, at_least=0.85)} (rounds {fmt(min(vs_naive))} to {fmt(max(vs_naive))})"),
        Row("turns/s ÷ naive without streaming", vs_create, "x", "—", "info"),
        Row("the naive loop made durable (lock, journal), latency ÷ naive (p50, four workers taking turns)",
            d50 / n4, "x", "—", f"info ({fmt(d50)} ms)"),
        Row("turn latency ÷ the naive loop made durable (p50, four workers taking turns)", b4 / d50, "x", "—",
            "info"),
        Row("the naive loop made durable, turns/s ÷ naive", safe_tp, "x", "—", "info"),
        Row("turns/s ÷ the naive loop made durable", vs_safe, "x", "—", "info"),
        Row(f"Baton turns/s, {PER_CHAT} turns per chat back to back", burst_tps, "turns/s", "—", "info"),
        Row("back to back ÷ distinct chats", burst_ratio, "x", "≥ 0.8", judge(burst_ratio, at_least=0.8)),
        Row("back-to-back chats whose turns completed out of send order", float(disorder), "chats", "0",
            judge(disorder, at_most=0)),
    ]


if __name__ == "__main__":
    print_rows(main())
