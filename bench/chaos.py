"""Chaos: coding runs and chat turns under provider faults, worker kills and Redis crashes, then the promises checked.

    python -m bench.chaos --minutes 10 --runs 6 --chats 6 --seed 1
    python -m bench.chaos --short                     # ~60-90 s, what tests/integration/test_chaos_short.py runs
    python -m bench.chaos --short --store cluster     # the store on a private 3-master Redis Cluster

What runs: a private AOF redis-server (the store, broker and result backend; kill -9'd and restarted), a second
private redis-server that is never restarted (the probe's counts, so they survive the chaos), the fake Messages API
(real SDK, real sockets) injecting drops, stalls, in-stream overloaded errors and 529s, and 2-3 real workers with
`BATON_LEASE_TTL=3`. Every scripted model answer calls `record_note` with a note unique to (unit, round); the tool
below counts each call and logs which process ran it and when, so "exactly once" and "never two live executions"
are checked from the effect's side, not from Baton's own bookkeeping.

Meanwhile, at seeded random moments: SIGKILL a worker (whole process group), SIGTERM one (a deploy), SIGKILL one
pool child (an OOM kill), or kill -9 Redis and restart it after a short outage; a replacement worker is started
after each worker loss. Every ~0.2 s a sampler looks for two processes inside a write tool of the same unit.

At the end (bounded wait for quiescence) it checks: every unit terminal with a stated class when failed, nothing
left queued/running/waiting, every note executed exactly once (0 only where the history shows the interrupted
placeholder for that call), no tool-call intervals of one unit overlapping across processes, every final transcript
valid (`agent.history.problems`), no request the fake API rejected. It prints the figures and exits 1 on any
violation. Logs are kept (path printed) when something fails.

With `--store cluster` the store is a private Redis Cluster of 3 masters, no replicas, AOF on every node
(`tests/support/redis_cluster.py`; `--appendfsync` is set on every node as on the one Redis), and the broker is
not the store: `--broker redis` is a separate plain AOF redis-server (also Celery's result backend), `--broker amqp`
the private RabbitMQ node. The Redis crash becomes kill -9 of one master (the seeded RNG picks which) and its restart
on the same port and AOF after the outage; the driver sends nothing until every node says cluster_state:ok again,
and how long that took after the restart is printed. A separate Redis broker has a crash of its own among the
events: kill -9 and a restart after the outage, while every worker's consumer retries it and the units go on.
Every check reads the cluster (`redis.cluster.RedisCluster`; the indexes over their 64 shards through
`tasks.store.indexes`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from agent.tools import tool
from tasks.store import indexes, keys
from tests.support import counting_tools

# -- the probe tool (workers load it with BATON_TOOLS=bench.chaos:TOOLS) ------------------------------------------

PROBE_LOG = "chaos:probe"  # one JSON line per tool start and end: note, owner, pid, ppid, time, lease holder's pid
INFLIGHT = "chaos:inflight:"  # hash per owner: "pid|note" -> start time, present while the tool runs
HOLD_ENV = "BATON_CHAOS_HOLD"  # seconds the tool stays inside its effect window (widens overlaps so we see them)
MASTERS = 3  # the cluster store's masters (--store cluster)
# What a read of the store may raise while the store (or one cluster master) is down: redis-py's cluster client
# raises some of its errors (no startup node answering, a slot not covered) outside redis.RedisError.
READ_ERRORS = (redis.RedisError, RedisClusterException)


def _counter() -> redis.Redis:
    return _client(os.environ.get("BATON_TEST_COUNTER_URL") or os.environ["BATON_REDIS_URL"])


@functools.lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


@functools.lru_cache(maxsize=4)
def _cluster_client(nodes: str) -> redis.Redis:
    """A cluster client from `BATON_REDIS_CLUSTER`'s startup nodes; no retries, so a master that is down answers
    "unknown" at once rather than after redis-py's backoff (the tool is inside its effect window)."""
    startup = [ClusterNode(host, int(port)) for host, _, port in (n.strip().rpartition(":") for n in nodes.split(","))]
    cluster = RedisCluster(startup_nodes=startup, socket_timeout=2, socket_connect_timeout=2,
                           retry=Retry(NoBackoff(), 0))
    return cluster  # type: ignore[return-value]


def _store() -> redis.Redis:
    """The workers' store as the probe reads it: on a cluster a plain client would be answered MOVED."""
    nodes = os.environ.get("BATON_REDIS_CLUSTER")
    if nodes:
        keys.use_cluster(True)  # the worker's own clients set it already; the lease's key must follow the cluster
        return _cluster_client(nodes)
    return _client(os.environ["BATON_REDIS_URL"])


def _holder_pid(owner: str) -> int | None:
    """The pid inside the lease token (`unit|node|host:pid|nonce`) of whoever holds the owner's lease now."""
    try:
        value = _store().get(keys.lease(owner))
    except READ_ERRORS:
        return -1  # the store is down: unknown
    parts = value.decode().split("|") if value else []
    if len(parts) < 3:
        return None
    try:
        return int(parts[2].rpartition(":")[2])
    except ValueError:
        return None


@tool(effect="write")
def record_note(note: str) -> str:
    """Record a note (a side effect; counted, with the process that ran it and when)."""
    owner = note.split("|")[1] if note.count("|") >= 2 else "unknown"
    pid, ppid = os.getpid(), os.getppid()
    tid = threading.get_ident()  # on a threads pool, the executions of a worker share its pid
    counter = _counter()
    start = {"ev": "start", "note": note, "owner": owner, "pid": pid, "tid": tid, "ppid": ppid,
             "holder": _holder_pid(owner)}
    start["t"] = time.time()
    counter.rpush(PROBE_LOG, json.dumps(start))
    counter.hset(INFLIGHT + owner, f"{pid}|{tid}|{note}", start["t"])
    result = counting_tools.record_note(note=note)  # the effect: test:calls:record_note and test:calls:log
    time.sleep(float(os.environ.get(HOLD_ENV, "0.3")))
    counter.hdel(INFLIGHT + owner, f"{pid}|{tid}|{note}")
    counter.rpush(PROBE_LOG, json.dumps({"ev": "end", "note": note, "pid": pid, "tid": tid, "t": time.time()}))
    return result


TOOLS = [record_note]

# -- the scripted model -------------------------------------------------------------------------------------------

MARKER = re.compile(r"\[\[chaos owner=(\S+) unit=(\S+) rounds=(\d+)\]\]")
FAULT_KINDS = ("drop", "stall", "overloaded", "http529")


def marker(owner: str, unit: str, rounds: int) -> str:
    return f"[[chaos owner={owner} unit={unit} rounds={rounds}]]"


class ChaosModel:
    """The fake API's handler: each unit's answers follow from the request alone (so replays stay consistent).

    The last chaos marker in the user texts names the unit; the assistant messages after it say which round this
    is. Rounds before the last call `record_note` with a note unique to (owner, unit, round); then a final text.
    A fraction of replies is broken on the way (seeded): dropped, stalled, overloaded in-stream, or a 529.
    """

    def __init__(self, seed: int, fault_rate: float, stall_seconds: float) -> None:
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.fault_rate = fault_rate
        self.stall_seconds = stall_seconds
        self.requests = 0
        self.faults: Counter[str] = Counter()
        self.unrouted = 0

    def __call__(self, body: dict[str, Any], index: int) -> Any:
        from tests.support.fake_anthropic import Fault, failing, text, tool_call

        messages = body.get("messages") or []
        found: tuple[int, re.Match[str]] | None = None
        for i, message in enumerate(messages):
            if message.get("role") != "user" or not isinstance(message.get("content"), list):
                continue
            for block in message["content"]:
                if block.get("type") == "text":
                    for match in MARKER.finditer(block.get("text", "")):
                        found = (i, match)
        with self._lock:
            self.requests += 1
            roll = self._rng.random()
            kind = self._rng.choice(FAULT_KINDS)
            after = self._rng.randint(0, 7)
        if found is None:
            with self._lock:
                self.unrouted += 1
            return text("no chaos marker found")
        i, match = found
        owner, unit, rounds = match.group(1), match.group(2), int(match.group(3))
        done = sum(1 for m in messages[i + 1 :] if m.get("role") == "assistant")
        if done < rounds:
            reply = tool_call("record_note", {"note": f"n|{owner}|{unit}|r{done}"})
        else:
            reply = text(f"done {unit}")
        if roll >= self.fault_rate:
            return reply
        with self._lock:
            self.faults[kind] += 1
        if kind == "http529":
            return failing(Fault("http", status=529, message="Overloaded"), like=reply)
        if kind == "stall":
            return failing(Fault("stall", after_events=after, seconds=self.stall_seconds), like=reply)
        return failing(Fault(kind, after_events=max(1, after)), like=reply)  # type: ignore[arg-type]


# -- the harness --------------------------------------------------------------------------------------------------


@dataclass
class Config:
    minutes: float
    runs: int
    chats: int
    seed: int
    workers: int = 3
    concurrency: int = 2
    fault_rate: float = 0.15
    stall_seconds: float = 3.0
    event_every: tuple[float, float] = (4.0, 12.0)
    outage: tuple[float, float] = (0.2, 2.5)
    quiesce_timeout: float = 180.0
    appendfsync: str = "everysec"
    turns_per_chat: int = 4
    backoff_scale: float = 0.0
    hold: float = 0.3
    keep: bool = False
    broker: str = "redis"  # or "amqp": a private RabbitMQ node is the broker, the AOF Redis stays the store
    pool: str = "prefork"  # Celery's pool; on "threads" every unit of a worker shares its process (no child to kill)
    store: str = "redis"  # or "cluster": a private Redis Cluster of MASTERS masters; the broker is then never the store


@dataclass
class UnitRef:
    kind: str  # "run" or "turn"
    owner: str
    unit: str
    rounds: int
    sent_at: float
    tag: str  # the unit's name inside its notes and final answer (a run's id; a chat turn's own tag)


@dataclass
class ChatSlot:
    chat_id: str
    sent: int = 0
    pending: list[UnitRef] = field(default_factory=list)
    follow_up_at: float | None = None  # monotonic time to send one more turn while the chat is busy


@dataclass
class Figures:
    kills: Counter[str] = field(default_factory=Counter)
    redis_restarts: int = 0
    broker_restarts: int = 0  # a broker of its own (beside a cluster store) killed -9 and restarted
    outage_seconds: float = 0.0
    master_back_seconds: list[float] = field(default_factory=list)  # cluster: restart -> cluster_state ok everywhere
    samples: int = 0
    lease_changes: int = 0
    send_errors: int = 0
    sigterm_exit_seconds: list[float] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)  # workers that exited without being killed, and why


class Chaos:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.tmp = Path(tempfile.mkdtemp(prefix="baton-chaos-"))
        self.queue = f"chaos-{uuid.uuid4().hex[:6]}"
        self.figures = Figures()
        self.violations: list[str] = []
        self.units: list[UnitRef] = []
        self.lock = threading.Lock()  # held while Redis is down, so the driver never sends into the outage
        self.stop_work = threading.Event()
        self.stop_sampler = threading.Event()
        self.workers: list[Any] = []
        self.retired: list[Any] = []
        self.deaths: dict[int, float] = {}  # pid -> when we killed it (for tool intervals with no end)
        self.sampled_overlaps: set[tuple[str, tuple[int, ...]]] = set()
        self._worker_seq = 0
        self.exiting: list[threading.Thread] = []
        self.cluster: Any = None  # the PrivateCluster when the store is a cluster
        self.broker: Any = None  # the plain Redis broker beside a cluster store (--broker redis)

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def start(self) -> None:
        from tasks.demo.embedded_redis import EmbeddedRedis
        from tests.support.fake_anthropic import FakeMessagesServer
        from tests.support.ports import free_port

        if self.cfg.store == "cluster":
            self._start_cluster()
        else:
            # The store is killed and restarted on its port: one no other test's server is handed meanwhile.
            self.store = EmbeddedRedis(self.tmp / "store", aof=True, port=free_port()).start()
            self._apply_fsync()
        self.rabbitmq = None
        if self.cfg.broker == "amqp":
            from tests.support.rabbitmq import RabbitMQNode

            self.rabbitmq = RabbitMQNode(self.tmp / "rabbitmq").start()
        elif self.cluster is not None:
            # Killed -9 and restarted on its port by the `broker` event, as the store is by `redis`.
            self.broker = EmbeddedRedis(self.tmp / "broker", aof=True, port=free_port()).start()
            self._apply_fsync(self.broker.url)
        self.counter = EmbeddedRedis(self.tmp / "counter").start()
        self.model = ChaosModel(self.cfg.seed + 1, self.cfg.fault_rate, self.cfg.stall_seconds)
        self.fake = FakeMessagesServer(self.model).start()
        if self.cluster is None:
            self.store_client = redis.Redis.from_url(self.store.url, socket_timeout=5, socket_connect_timeout=2)
            self.broker_client = self.store_client
        else:
            keys.use_cluster(True)  # this process computes the cluster's keys (the Client built below sets it too)
            nodes = [ClusterNode("127.0.0.1", m.port) for m in self.masters]
            self.store_client = RedisCluster(startup_nodes=nodes, socket_timeout=5, socket_connect_timeout=2)
            self.broker_client = redis.Redis.from_url(self.broker.url) if self.broker is not None else None
        self.counter_client = redis.Redis.from_url(self.counter.url)
        for _ in range(self.cfg.workers):
            self.add_worker()
        self.client = self._client()

    def _start_cluster(self) -> None:
        from tests.support.redis_cluster import PrivateCluster

        self.store = None
        self.cluster = PrivateCluster(self.tmp / "cluster", masters=MASTERS).start()
        self.masters = self.cluster.masters()  # no replicas: the same masters, in slot order, for the whole run
        for node in self.masters:
            self._apply_node_fsync(node)

    def _apply_fsync(self, url: str | None = None) -> None:
        if self.cfg.appendfsync != "everysec":
            redis.Redis.from_url(url or self.store.url).config_set("appendfsync", self.cfg.appendfsync)

    def _apply_node_fsync(self, node: Any) -> None:
        """A cluster node's config file says `appendfsync always` (tests/support/redis_cluster.py): the bench's
        `--appendfsync` is set on each node after every start, as on the one Redis."""
        with redis.Redis(port=node.port, socket_timeout=5) as client:
            client.config_set("appendfsync", self.cfg.appendfsync)

    @property
    def store_url(self) -> str:
        """BATON_REDIS_URL: the one Redis; beside a cluster only the password's place (one node, database 0)."""
        if self.cluster is None:
            return str(self.store.url)
        return f"redis://127.0.0.1:{self.masters[0].port}/0"

    def _store_env(self) -> dict[str, str]:
        """What a cluster store adds: its startup nodes, and a broker that is not the store."""
        if self.cluster is None:
            return {}
        broker = self.rabbitmq.url if self.rabbitmq is not None else self.broker.url
        return {"BATON_REDIS_CLUSTER": ",".join(f"127.0.0.1:{m.port}" for m in self.masters),
                "BATON_BROKER_URL": broker}

    @property
    def env(self) -> dict[str, str]:
        from tests.support.processes import REPO

        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", str(self.tmp)),
            "PYTHONPATH": str(REPO),
            "BATON_REDIS_URL": self.store_url,
            "BATON_QUEUE": self.queue,
            "BATON_PROVIDER": "anthropic",
            "ANTHROPIC_BASE_URL": self.fake.url,
            "ANTHROPIC_API_KEY": "sk-ant-chaos-not-a-real-key",
            "BATON_MODEL": "claude-chaos",
            "BATON_TOOLS": "bench.chaos:TOOLS",
            "BATON_TEST_COUNTER_URL": self.counter.url,
            "BATON_BACKOFF_SCALE": str(self.cfg.backoff_scale),
            "BATON_LEASE_TTL": "3",
            "BATON_MAX_INTERRUPTIONS": "50",
            "BATON_STREAM_IDLE_TIMEOUT": "2",
            HOLD_ENV: str(self.cfg.hold),
            **({"BATON_BROKER_URL": self.rabbitmq.url} if self.rabbitmq is not None else {}),
            **self._store_env(),
        }

    def _client(self) -> Any:
        from config.settings import Settings
        from tasks.client import Client

        overrides = {k.removeprefix("BATON_").lower(): v for k, v in self.env.items() if k.startswith("BATON_")}
        return Client(Settings(**overrides))

    def add_worker(self) -> Any:
        from tests.support.processes import Worker

        self._worker_seq += 1
        worker = Worker(
            f"chaos{self._worker_seq}", self.env, self.tmp, concurrency=self.cfg.concurrency, pool=self.cfg.pool
        )
        self.workers.append(worker)
        worker.start(timeout=90)
        return worker

    def shutdown(self, failed: bool) -> None:
        self.stop_work.set()
        self.stop_sampler.set()
        for worker in [*self.workers, *self.retired]:
            with contextlib.suppress(Exception):
                if worker.alive:
                    worker.kill9()
                worker.stop()
        with contextlib.suppress(Exception):
            self.client.close()
        with contextlib.suppress(Exception):
            self.fake.stop()
        for server in (getattr(self, "store", None), getattr(self, "counter", None), getattr(self, "rabbitmq", None),
                       self.broker, self.cluster):
            if server is not None:
                with contextlib.suppress(Exception):
                    server.stop()
        if failed or self.cfg.keep:
            print(f"logs and data kept in {self.tmp}", flush=True)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the work -------------------------------------------------------------------------------------------------

    def driver(self) -> None:
        """Keep `runs` coding runs and `chats` chats busy until told to stop.

        A chat gets its next turn once the previous ones ended; sometimes two at once, and sometimes a follow-up
        a random moment later while its turn is still running (a user typing on), so turns queue behind each other.
        """
        runs: dict[int, UnitRef | None] = dict.fromkeys(range(self.cfg.runs))
        chats = [ChatSlot(f"cc{i}-{uuid.uuid4().hex[:6]}") for i in range(self.cfg.chats)]
        workspace = self.tmp / "workspace"
        workspace.mkdir(exist_ok=True)
        while not self.stop_work.is_set():
            try:
                for slot, ref in runs.items():
                    if ref is None or self._terminal(ref):
                        runs[slot] = self._start_run(workspace)
                for slot, chat in enumerate(chats):
                    room = chat.sent < self.cfg.turns_per_chat
                    if chat.pending and not all(self._terminal(ref) for ref in chat.pending):
                        if chat.follow_up_at is not None and time.monotonic() >= chat.follow_up_at and room:
                            chat.pending.append(self._send_turn(chat.chat_id))
                            chat.sent += 1
                            chat.follow_up_at = None
                        continue
                    if not room:
                        chat = chats[slot] = ChatSlot(f"cc{slot}-{uuid.uuid4().hex[:6]}")
                    burst = 2 if self.rng.random() < 0.25 and chat.sent + 2 <= self.cfg.turns_per_chat else 1
                    chat.pending = [self._send_turn(chat.chat_id) for _ in range(burst)]
                    chat.sent += burst
                    roll = self.rng.random()
                    chat.follow_up_at = time.monotonic() + self.rng.uniform(0.2, 4.0) if roll < 0.35 else None
            except (redis.RedisError, OSError) as err:
                self.figures.send_errors += 1
                print(f"  driver: {type(err).__name__}: {err}", flush=True)
            self.stop_work.wait(0.2)

    def _terminal(self, ref: UnitRef) -> bool:
        from tasks.store.reads import load_record

        try:
            rec = load_record(self.store_client, ref.owner, ref.unit)
        except READ_ERRORS:
            return False
        return rec is not None and rec.terminal

    def _start_run(self, workspace: Path) -> UnitRef:
        run_id = f"cr-{uuid.uuid4().hex[:10]}"
        owner = keys.owner("run", run_id)
        rounds = self.rng.randint(3, 5)
        with self.lock:
            self.client.start_run(f"Chaos run. {marker(owner, run_id, rounds)}", workspace=workspace, run_id=run_id)
        ref = UnitRef("run", owner, run_id, rounds, time.time(), run_id)
        self.units.append(ref)
        return ref

    def _send_turn(self, chat_id: str) -> UnitRef:
        owner = keys.owner("chat", chat_id)
        unit = f"u{uuid.uuid4().hex[:10]}"
        rounds = self.rng.randint(1, 4)
        with self.lock:
            turn = self.client.send_message(chat_id, f"Chaos turn. {marker(owner, unit, rounds)}")
        ref = UnitRef("turn", owner, turn.turn_id, rounds, time.time(), unit)
        self.units.append(ref)
        return ref

    # -- the chaos ------------------------------------------------------------------------------------------------

    def chaos(self, until: float) -> None:
        kinds = ["sigkill", "sigterm", "redis", "child"]
        if self.broker is not None:  # a broker of its own (beside a cluster store): its outage is a fault of its own
            kinds.append("broker")
        plan = self.rng.sample(kinds, len(kinds))  # every kind at least once, early
        if self.cluster is not None:
            # A master's crash is what the cluster store adds; a short run's 45 s hold about three events (each
            # worker kill waits for its replacement to be ready), so it goes first, not wherever the draw put it.
            plan.remove("redis")
            plan.insert(0, "redis")
        while time.monotonic() < until:
            wait = self.rng.uniform(*self.cfg.event_every)
            if time.monotonic() + wait >= until:
                break
            moment = time.monotonic() + wait
            while time.monotonic() < moment:
                self.supervise()
                time.sleep(min(0.5, max(0.0, moment - time.monotonic())))
            kind = plan.pop(0) if plan else self.rng.choices(kinds, weights=[3, 3, 2, 2, 2][:len(kinds)])[0]
            getattr(self, f"_{kind}")()

    def supervise(self) -> None:
        """Like compose's `restart: unless-stopped`: a worker that exited on its own is counted and replaced."""
        for worker in [w for w in self.workers if not w.alive]:
            self.deaths.setdefault(worker.proc.pid, time.time())
            reason = next((line for line in reversed(worker.log().splitlines()) if "Unrecoverable error" in line),
                          f"exit code {worker.proc.returncode}")
            print(f"  [{_clock()}] {worker.name} exited on its own ({reason[:160]}); starting a replacement",
                  flush=True)
            self.figures.crashes.append(f"{worker.name}: {reason[:200]}")
            self.workers.remove(worker)
            self.retired.append(worker)
            self.add_worker()

    def _pick(self) -> Any:
        self.supervise()
        return self.rng.choice([w for w in self.workers if w.alive])

    def _sigkill(self) -> None:
        worker = self._pick()
        now = time.time()
        for pid in [worker.proc.pid, *_children(worker.proc.pid)]:
            self.deaths[pid] = now
        print(f"  [{_clock()}] SIGKILL {worker.name}", flush=True)
        worker.kill9()
        self.figures.kills["sigkill"] += 1
        self.workers.remove(worker)
        self.retired.append(worker)
        self.add_worker()

    def _sigterm(self) -> None:
        worker = self._pick()
        print(f"  [{_clock()}] SIGTERM {worker.name}", flush=True)
        worker.terminate()
        exiting = threading.Thread(target=self._await_exit, args=(worker, time.monotonic()), daemon=True)
        exiting.start()
        self.exiting.append(exiting)
        self.figures.kills["sigterm"] += 1
        self.workers.remove(worker)
        self.retired.append(worker)
        self.add_worker()

    def _child(self) -> None:
        worker = self._pick()
        children = _children(worker.proc.pid)
        if not children:
            return
        pid = self.rng.choice(children)
        print(f"  [{_clock()}] SIGKILL pool child {pid} of {worker.name}", flush=True)
        self.deaths[pid] = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self.figures.kills["child"] += 1

    def _redis(self) -> None:
        if self.cluster is not None:
            self._master()
            return
        outage = self._crash(self.store, "Redis")
        self.figures.redis_restarts += 1
        self.figures.outage_seconds += outage

    def _broker(self) -> None:
        """kill -9 the broker (a Redis of its own, on its AOF) and restart it after the outage: every worker's
        consumer retries it meanwhile, and the units they run go on against the store."""
        self._crash(self.broker, "the broker")
        self.figures.broker_restarts += 1

    def _crash(self, server: Any, name: str) -> float:
        """kill -9 `server`, restart it on its port and AOF after a seeded outage (the driver held meanwhile), and
        set `--appendfsync` on it again; returns the outage."""
        outage = self.rng.uniform(*self.cfg.outage)
        with self.lock:
            print(f"  [{_clock()}] kill -9 {name}; restart in {outage:.1f}s", flush=True)
            server.kill9()
            time.sleep(outage)
            server.start()
            self._apply_fsync(server.url)
        return outage

    def _master(self) -> None:
        """The cluster's Redis crash: kill -9 one master (seeded), restart it on its port and AOF after the outage,
        and hold the driver until every node says cluster_state:ok (past the node timeout the other masters
        had marked it failed, and with full coverage required the whole cluster refused commands meanwhile)."""
        outage = self.rng.uniform(*self.cfg.outage)
        index = self.rng.randrange(len(self.masters))
        master = self.masters[index]
        with self.lock:
            print(f"  [{_clock()}] kill -9 cluster master {index + 1} of {len(self.masters)} (port {master.port}); "
                  f"restart in {outage:.1f}s", flush=True)
            killed = time.monotonic()
            master.kill9()
            time.sleep(outage)
            restarted = time.monotonic()
            master.start(timeout=30)  # returns once it answers PING: its AOF is loaded
            self._apply_node_fsync(master)
            self.cluster.wait_ok(60)
            back = time.monotonic() - restarted
        print(f"  [{_clock()}] cluster master {master.port} back: cluster_state ok on every node {back:.1f}s after "
              f"its restart ({time.monotonic() - killed:.1f}s after kill -9)", flush=True)
        self.figures.redis_restarts += 1
        self.figures.outage_seconds += outage
        self.figures.master_back_seconds.append(back)

    def _await_exit(self, worker: Any, started: float) -> None:
        """A worker sent SIGTERM must exit on its own within 30 s (a deploy's grace period)."""
        try:
            worker.proc.wait(30)
        except Exception:
            self.violations.append(f"{worker.name} did not exit within 30 s of SIGTERM")
            worker.kill9()
        else:
            self.figures.sigterm_exit_seconds.append(time.monotonic() - started)

    # -- the sampler ----------------------------------------------------------------------------------------------

    def sampler(self) -> None:
        """Every ~0.2 s: two live executors (process, thread) inside a write tool of one unit is two live executions."""
        holders: dict[str, bytes] = {}
        while not self.stop_sampler.wait(0.2):
            self.figures.samples += 1
            try:
                for key in self.counter_client.scan_iter(f"{INFLIGHT}*", count=500):
                    owner = key.decode().removeprefix(INFLIGHT)
                    executors = {tuple(f.decode().split("|", 2)[:2]) for f in self.counter_client.hkeys(key)}
                    live = tuple(sorted(e for e in executors if _alive(int(e[0]))))
                    if len(live) > 1 and (owner, live) not in self.sampled_overlaps:
                        self.sampled_overlaps.add((owner, live))
                        self.violations.append(f"sampler: executors {live} inside record_note of {owner} at once")
            except redis.RedisError:
                pass
            try:
                leases = list(self.store_client.scan_iter("baton:*:lease", count=1000))
                values = self._mget(leases) if leases else []
                for key, value in zip(leases, values, strict=True):
                    if value is not None and holders.get(key) not in (None, value):
                        self.figures.lease_changes += 1
                    if value is not None:
                        holders[key] = value
            except READ_ERRORS:
                pass

    def _mget(self, names: list[bytes]) -> list[bytes | None]:
        """MGET of keys on any slots: a cluster client splits it by slot (one MGET may not cross slots)."""
        if self.cluster is None:
            return list(self.store_client.mget(names))
        return list(self.store_client.mget_nonatomic(names))  # type: ignore[attr-defined]

    # -- the end --------------------------------------------------------------------------------------------------

    def quiesce(self) -> list[UnitRef]:
        """Wait (bounded) until every unit is terminal; returns the ones that are not."""
        self.supervise()
        while len([w for w in self.workers if w.alive]) < 2:
            self.add_worker()
        deadline = time.monotonic() + self.cfg.quiesce_timeout
        pending = list(self.units)
        while pending and time.monotonic() < deadline:
            pending = [ref for ref in pending if not self._terminal(ref)]
            if pending:
                self.supervise()
                time.sleep(0.5)
        settle = time.monotonic() + 30  # finished owners leave the pending set within ~15 s
        while (indexes.count(self.store_client, keys.PENDING) or indexes.count(self.store_client, keys.ACTIVE)) and \
                time.monotonic() < settle:
            time.sleep(0.5)
        settle = time.monotonic() + 10  # let tools still inside their window (abandoned by a drain) finish
        while self.counter_client.keys(f"{INFLIGHT}*") and time.monotonic() < settle:
            live = [k for k in self.counter_client.keys(f"{INFLIGHT}*") if any(
                _alive(int(f.decode().split("|", 1)[0])) for f in self.counter_client.hkeys(k))]
            if not live:
                break
            time.sleep(0.2)
        return pending

    def check(self, pending: list[UnitRef]) -> dict[str, Any]:
        from agent.history.repair import problems, repair
        from agent.loop.failures import FailureClass
        from agent.messages import INTERRUPTED_RESULT
        from tasks.store.reads import load_record, load_transcript

        v = self.violations
        for ref in pending:
            v.append(f"lost: {ref.kind} {ref.owner} {ref.unit} not terminal: {self._diagnose(ref)}")
        statuses: Counter[str] = Counter()
        classes: Counter[str] = Counter()
        failures: list[str] = []  # what each failed unit said: a failure in a run with no violation explains itself
        interruptions = auto_resumes = resumed = 0
        records: dict[tuple[str, str], Any] = {}
        for ref in self.units:
            rec = load_record(self.store_client, ref.owner, ref.unit)
            if rec is None:
                v.append(f"lost: no record for {ref.kind} {ref.owner} {ref.unit}")
                continue
            records[(ref.owner, ref.unit)] = rec
            statuses[f"{ref.kind}:{rec.status}"] += 1
            interruptions += rec.interruptions
            auto_resumes += rec.auto_resumes
            resumed += rec.resumed
            if rec.status == "failed":
                cls = rec.failure.failure_class if rec.failure else None
                classes[f"{ref.kind}:{cls}"] += 1
                said = rec.failure.message if rec.failure else ""
                failures.append(f"{ref.kind} {ref.owner} {ref.unit}: {cls}: {said}")
                if cls not in set(FailureClass):
                    v.append(f"{ref.kind} {ref.unit} failed without a stated class: {rec.failure}")

        # Effects: one per note, from the counter log (the tool's own side of the story).
        log = [x.decode() for x in self.counter_client.lrange(counting_tools.CALLS_KEY, 0, -1)]
        per_note = Counter(x.removeprefix("record_note:") for x in log if x.startswith("record_note:"))
        for note, n in per_note.items():
            if n > 1:
                v.append(f"effect executed {n} times: {note} ({self._note_story(note)})")

        # Histories: valid, each round of a finished unit present once, a 0-count call only with the placeholder.
        owners = sorted({ref.owner for ref in self.units})
        placeholders = history_problems = 0
        by_owner: dict[str, list[UnitRef]] = defaultdict(list)
        for ref in self.units:
            by_owner[ref.owner].append(ref)
        for owner in owners:
            transcript = load_transcript(self.store_client, owner)
            found = problems(transcript)
            if found:
                failed_turns = {r.unit for r in by_owner[owner] if getattr(records.get((owner, r.unit)), "status",
                                                                            None) == "failed"}
                after_failure = all("same role" in p for p in found) and failed_turns and not problems(
                    repair(transcript))
                if after_failure:
                    history_problems += 1  # a failed turn's prompt followed by the next prompt; repair merges them
                else:
                    v.append(f"history of {owner} is invalid for the model API: {found[:3]}")
            uses = {}
            results = {}
            for message in transcript:
                for block in message.tool_uses:
                    if block.name == "record_note":
                        note = str(block.input.get("note"))
                        if note in uses.values():
                            v.append(f"{owner}: the call for {note} appears twice in the history")
                        uses[block.id] = note
                for block in message.tool_results:
                    results[block.tool_use_id] = block
            for use_id, note in uses.items():
                result = results.get(use_id)
                is_placeholder = result is not None and result.content == INTERRUPTED_RESULT
                placeholders += is_placeholder
                if per_note.get(note, 0) == 0 and not is_placeholder:
                    v.append(f"{owner}: {note} has result {result!r} but its effect never ran")
            for ref in by_owner[owner]:
                rec = records.get((owner, ref.unit))
                if rec is None or rec.status != "completed":
                    continue
                tag = ref.tag
                want = {f"n|{owner}|{tag}|r{k}" for k in range(ref.rounds)}
                missing = want - set(uses.values())
                if missing:
                    v.append(f"{owner}: completed {ref.unit} lacks rounds {sorted(missing)} in its history")
                finals = [m for m in transcript if m.role == "assistant" and m.text == f"done {tag}"]
                if len(finals) != 1:
                    v.append(f"{owner}: completed {ref.unit} has {len(finals)} final answers in its history")

        # Order: a chat's turns end in the order they were sent.
        for owner in owners:
            if not owner.startswith("chat:"):
                continue
            sent = [x.decode() for x in self.store_client.lrange(keys.turns(owner), 0, -1)]
            ended = []
            for _id, fields in self.store_client.xrange(keys.events(owner)):
                event = json.loads(fields[b"e"])
                if event["type"] in ("turn.completed", "turn.failed", "turn.stopped"):
                    ended.append(event["turn_id"])
            if ended != sent:
                v.append(f"{owner}: turns sent {sent} but ended in the order {ended}")

        # Single flight: tool intervals of one unit (owner) never overlap across processes.
        overlaps = self._interval_overlaps()
        v.extend(text for _, text in overlaps)
        unleased = self._unleased()
        if self.fake.rejections:
            v.extend(f"fake API rejected a request (invalid history sent): {r[:200]}" for r in self.fake.rejections)
        if self.model.unrouted:
            v.append(f"{self.model.unrouted} requests carried no chaos marker")
        leftovers = self._leftovers()
        logs = "".join(w.log() for w in [*self.workers, *self.retired])
        if overlaps:  # what the workers said about those units, and any beat that came late: the story of a takeover
            owners = {owner for owner, _ in overlaps}
            told = [ln for ln in logs.splitlines() if "beat came" in ln or any(o in ln for o in owners)]
            v.extend(f"  log: {ln[:300]}" for ln in told[-40:])
        return {
            "swept": logs.count("its worker was lost; requeued"),
            "late_beats": logs.count("the beat came"),
            "republished": logs.count("the broker lost its message before it started"),
            "statuses": statuses,
            "failure_classes": classes,
            "failures": failures,
            "interruptions": interruptions,
            "auto_resumes": auto_resumes,
            "resumed": resumed,
            "effects": sum(per_note.values()),
            "notes": len(per_note),
            "placeholders": placeholders,
            "failed_turn_prompts_merged": history_problems,
            "unleased_tool_starts": unleased,
            "leftovers": leftovers,
        }

    def _note_story(self, note: str) -> str:
        lines = [json.loads(x) for x in self.counter_client.lrange(PROBE_LOG, 0, -1)]
        mine = [f"{d['ev']} pid={d['pid']} t={d['t']:.2f}" for d in lines if d["note"] == note]
        return "; ".join(mine)

    def _interval_overlaps(self) -> list[tuple[str, str]]:
        """(owner, what overlapped) for every two executors inside the write tool of one owner at once."""
        lines = [json.loads(x) for x in self.counter_client.lrange(PROBE_LOG, 0, -1)]
        # An executor is a (pid, thread): on a threads pool one process runs many units, and could run one twice.
        ends = {(d["pid"], d.get("tid"), d["note"]): d["t"] for d in lines if d["ev"] == "end"}
        spans: dict[str, list[tuple[float, float, tuple[int, int | None], str]]] = defaultdict(list)
        for d in lines:
            if d["ev"] != "start":
                continue
            end = (ends.get((d["pid"], d.get("tid"), d["note"])) or self.deaths.get(d["pid"])
                   or self.deaths.get(d["ppid"]))
            if end is None:
                end = d["t"] + self.cfg.hold
            spans[d["owner"]].append((d["t"], end, (d["pid"], d.get("tid")), d["note"]))
        found = []
        for owner, items in spans.items():
            items.sort()
            for k, (s1, e1, p1, n1) in enumerate(items):
                for s2, e2, p2, n2 in items[k + 1 :]:
                    if s2 >= e1:
                        break
                    if p1 == p2:
                        continue
                    found.append((owner, f"two live executions of {owner}: pid {p1} in {n1} [{s1:.2f}-{e1:.2f}]"
                                          f" and pid {p2} in {n2} [{s2:.2f}-{e2:.2f}]"))
        return found

    def _unleased(self) -> int:
        """Tool starts where the store answered and the lease was held by another process (a stale execution)."""
        lines = [json.loads(x) for x in self.counter_client.lrange(PROBE_LOG, 0, -1)]
        bad = [d for d in lines if d["ev"] == "start" and d["holder"] not in (-1, d["pid"])]
        for d in bad:
            holder = d["holder"]
            if holder is not None:
                self.violations.append(f"{d['note']} started in pid {d['pid']} while pid {holder} held the lease")
        return len(bad)

    def _leftovers(self) -> dict[str, int]:
        """Keys that must be gone once everything settled: leases, journals, stop flags, active entries."""
        out: Counter[str] = Counter()
        for key in self.store_client.scan_iter("baton:*", count=1000):  # a cluster client scans every master
            name = key.decode()
            if self.cluster is not None:
                # `baton:{SHARD}:chat:ID:lease`: the part after the owner (an id has no colon: keys.ID_PATTERN)
                rest = name.partition("}:")[2].split(":")
                if len(rest) > 2 and rest[0] in ("chat", "run") and rest[2] in ("lease", "journal", "stop", "queue"):
                    out[rest[2]] += 1
                continue
            for part in ("lease", "journal", "stop", "queue"):
                if f"}}:{part}" in name:
                    out[part] += 1
        out["active"] = indexes.count(self.store_client, keys.ACTIVE)
        out["pending"] = indexes.count(self.store_client, keys.PENDING)
        return dict(out)

    def _diagnose(self, ref: UnitRef) -> str:
        from tasks.store.reads import load_record

        with contextlib.suppress(Exception):
            rec = load_record(self.store_client, ref.owner, ref.unit)
            lease = self.store_client.get(keys.lease(ref.owner))
            active = self.store_client.zscore(keys.active(ref.owner), ref.owner)  # keys.ACTIVE on one Redis
            queued = [x.decode() for x in self.store_client.lrange(keys.queue(ref.owner), 0, -1)]
            task_id = rec.task_id if rec else ""
            if self.rabbitmq is not None:  # RabbitMQ holds the messages: say how many its queue has
                where = [f"RabbitMQ queue holds {self.rabbitmq.queues().get(self.queue, {}).get('messages')}"]
            else:
                where = _broker_places(self.broker_client, self.queue, task_id)
            if where == ["nowhere"]:  # the queue's story is in the broker's AOF (the store's, on one Redis)
                where.append(_aof_story((self.broker or self.store).dir, self.queue, task_id))
            fields = rec.model_dump(include={"status", "waiting_reason", "generation", "interruptions",
                                             "history_len", "task_id", "steps", "auto_resumes"}) if rec else None
            return f"record={fields} lease={lease!r} active={active} chat_queue={queued} message={where}"
        return "(could not read diagnostics)"


def _broker_places(client: redis.Redis, queue: str, task_id: str) -> list[str]:
    """Where the unit's Celery message is: in the queue, unacked (held by a consumer), or nowhere."""
    places = []
    for raw in client.lrange(queue, 0, -1):
        if task_id.encode() in raw:
            places.append("queued")
    for tag, raw in client.hgetall("unacked").items():
        if task_id.encode() in raw:
            since = client.zscore("unacked_index", tag)
            places.append(f"unacked since {time.time() - since:.0f}s" if since else "unacked")
    return places or ["nowhere"]


def _aof_commands(directory: Path) -> list[list[bytes]]:
    """Every command in the store's append-only file(s), in order (RESP arrays)."""
    commands: list[list[bytes]] = []
    for path in sorted(directory.rglob("*.aof*")):
        data, i = path.read_bytes(), 0
        while i < len(data):
            if data[i : i + 1] != b"*":
                i = data.index(b"\n", i) + 1
                continue
            j = data.index(b"\r\n", i)
            argc, i, args = int(data[i + 1 : j]), j + 2, []
            for _ in range(argc):
                j = data.index(b"\r\n", i)
                size, i = int(data[i + 1 : j]), j + 2
                args.append(data[i : i + size])
                i += size + 2
            commands.append(args)
    return commands


def _aof_story(directory: Path, queue: str, task_id: str) -> str:
    """What the AOF says happened to a vanished message: replays the queue's pushes and pops to find its last pop."""
    needle = task_id.encode()
    with contextlib.suppress(Exception):
        items: list[bytes] = []  # the Redis list, left to right (LPUSH adds left, BRPOP takes right)
        popped_at = None
        commands = _aof_commands(directory)
        for index, cmd in enumerate(commands):
            if len(cmd) < 2 or cmd[1] != queue.encode():
                continue
            op = cmd[0].upper()
            if op == b"LPUSH":
                items[:0] = list(reversed(cmd[2:]))
            elif op == b"RPUSH":
                items.extend(cmd[2:])
            elif op == b"RPOP" and items and needle in items.pop():
                popped_at = index
        if popped_at is None:
            return "AOF: never popped (the push itself was lost)"
        tail = commands[popped_at + 1 : popped_at + 200]
        if any(c[0].upper() == b"HSET" and c[1] == b"unacked" and needle in c[3] for c in tail if len(c) > 3):
            return f"AOF: popped (command #{popped_at}) and recorded in unacked, then acked or removed"
        return (f"AOF: popped by a consumer's BRPOP (command #{popped_at}) and never recorded in kombu's unacked "
                "hash: lost in the BRPOP -> HSET unacked window (Redis or the consumer died in between)")
    return "AOF: could not be read"


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rpartition(")")[2].split()[1]) == pid:
                    out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


_T0 = time.monotonic()


def _clock() -> str:
    return f"{time.monotonic() - _T0:6.1f}s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the chaos lasts")
    parser.add_argument("--runs", type=int, default=6, help="coding runs kept in flight")
    parser.add_argument("--chats", type=int, default=6, help="chats kept busy")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--short", action="store_true", help="~60-90 s: 45 s of chaos, 2 workers, 3 runs, 3 chats")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--fault-rate", type=float, default=0.15)
    parser.add_argument("--appendfsync", choices=["everysec", "always"], default="everysec")
    parser.add_argument("--event-every", default="4,12", help="seconds between chaos events: LO,HI (seeded uniform)")
    parser.add_argument("--backoff-scale", type=float, default=0.0, help="BATON_BACKOFF_SCALE (1 = production)")
    parser.add_argument("--keep", action="store_true", help="keep logs and data even on success")
    parser.add_argument("--broker", choices=["redis", "amqp"], default="redis",
                        help="the Celery broker: the store's Redis, or a private RabbitMQ node (rabbitmq-server)")
    parser.add_argument("--pool", choices=["prefork", "threads", "gevent"], default="prefork",
                        help="the workers' Celery pool")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="units per worker (default 2; 8 on a threads or gevent pool)")
    parser.add_argument("--store", choices=["redis", "cluster"], default="redis",
                        help="the store: the AOF Redis, or a private Redis Cluster of 3 masters (Redis 7 needed); "
                             "beside a cluster the broker is a separate plain Redis (--broker redis) or RabbitMQ")
    args = parser.parse_args(argv)
    if args.store == "cluster":
        from tests.support.redis_cluster import find_cluster_binaries

        if find_cluster_binaries() is None:
            parser.error("--store cluster needs a Redis 7 redis-server and redis-cli (cluster-port)")
    concurrency = args.concurrency or (2 if args.pool == "prefork" else 8)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the workers and servers we started
    lo, hi = (float(x) for x in args.event_every.split(","))
    cfg = Config(args.minutes, args.runs, args.chats, args.seed, workers=args.workers, fault_rate=args.fault_rate,
                 event_every=(lo, hi), appendfsync=args.appendfsync, keep=args.keep, backoff_scale=args.backoff_scale,
                 broker=args.broker, pool=args.pool, concurrency=concurrency, store=args.store)
    if args.short:
        cfg = Config(0.75, 3, 3, args.seed, workers=2, fault_rate=args.fault_rate, event_every=(5.0, 8.0),
                     quiesce_timeout=90.0, appendfsync=args.appendfsync, keep=args.keep,
                     backoff_scale=args.backoff_scale, broker=args.broker, pool=args.pool, concurrency=concurrency,
                     store=args.store)
    return run(cfg)


def run(cfg: Config) -> int:
    chaos = Chaos(cfg)
    failed = True
    started = time.monotonic()
    print(f"chaos: {cfg.minutes:g} min, {cfg.runs} runs + {cfg.chats} chats in flight, {cfg.workers} workers, "
          f"fault rate {cfg.fault_rate:g}, backoff scale {cfg.backoff_scale:g}, seed {cfg.seed}, appendfsync "
          f"{cfg.appendfsync}, broker {cfg.broker}{_store_words(cfg)}, pool {cfg.pool} -c {cfg.concurrency}; "
          f"data in {chaos.tmp}",
          flush=True)
    try:
        chaos.start()
        threads = [threading.Thread(target=chaos.driver, name="driver", daemon=True),
                   threading.Thread(target=chaos.sampler, name="sampler", daemon=True)]
        for t in threads:
            t.start()
        chaos.chaos(until=time.monotonic() + cfg.minutes * 60)
        chaos.stop_work.set()
        threads[0].join(timeout=30)
        print(f"  [{_clock()}] chaos over; waiting for quiescence (≤ {cfg.quiesce_timeout:g}s)", flush=True)
        pending = chaos.quiesce()
        for t in chaos.exiting:
            t.join(timeout=35)
        chaos.stop_sampler.set()
        threads[1].join(timeout=5)
        summary = chaos.check(pending)
        failed = bool(chaos.violations)
        _report(chaos, summary, time.monotonic() - started)
        return 1 if failed else 0
    finally:
        chaos.shutdown(failed)


def _store_words(cfg: Config) -> str:
    """The header's words for a cluster store (none for the one Redis, whose header is as it always was)."""
    if cfg.store != "cluster":
        return ""
    broker = "RabbitMQ" if cfg.broker == "amqp" else "a separate plain AOF Redis"
    return f", store cluster of {MASTERS} masters (AOF on every node; broker {broker})"


def _report(chaos: Chaos, s: dict[str, Any], elapsed: float) -> None:
    f, m = chaos.figures, chaos.model
    runs = sum(1 for u in chaos.units if u.kind == "run")
    turns = len(chaos.units) - runs
    exits = f.sigterm_exit_seconds
    print("figures:", flush=True)
    print(f"  elapsed {elapsed:.0f}s; runs {runs}, turns {turns} in "
          f"{len({u.owner for u in chaos.units if u.kind == 'turn'})} chats", flush=True)
    print(f"  outcomes {dict(sorted(s['statuses'].items()))}; failure classes {dict(s['failure_classes'])}")
    for line in s["failures"][:10]:
        print(f"    failed: {line[:300]}")
    print(f"  requests {m.requests + len(chaos.fake.rejections)} (rejected {len(chaos.fake.rejections)}); "
          f"faults injected {sum(m.faults.values())} {dict(m.faults)}")
    if chaos.cluster is not None:
        backs = ", ".join(f"{b:.1f}" for b in f.master_back_seconds) or "-"
        restarts = (f"cluster master restarts {f.redis_restarts} ({f.outage_seconds:.1f}s down; cluster_state ok "
                    f"[{backs}]s after each restart); broker restarts {f.broker_restarts}")
    else:
        restarts = f"redis restarts {f.redis_restarts} ({f.outage_seconds:.1f}s down)"
    print(f"  kills {dict(f.kills)}; {restarts}; "
          f"SIGTERM exits in {max(exits):.1f}s max" if exits else
          f"  kills {dict(f.kills)}; {restarts}")
    print(f"  workers that exited on their own (replaced, as compose's restart policy would): {len(f.crashes)}")
    for line in f.crashes:
        print(f"    - {line}")
    print(f"  interruptions {s['interruptions']}, auto-resumes {s['auto_resumes']}, resumed units {s['resumed']}, "
          f"lease holder changes seen {f.lease_changes}, samples {f.samples}")
    print(f"  write effects {s['effects']} for {s['notes']} notes; placeholders in histories {s['placeholders']}; "
          f"failed-turn prompts merged by repair {s['failed_turn_prompts_merged']}; "
          f"tool starts without the lease {s['unleased_tool_starts']}")
    print(f"  recovery in the workers' logs: {s['swept']} lost executions requeued by the lease sweep, "
          f"{s['republished']} lost broker messages republished by the pending sweep; "
          f"{s['late_beats']} lease beats over 1 s late")
    print(f"  left in {'the cluster' if chaos.cluster is not None else 'Redis'} after quiescence: {s['leftovers']}")
    print(f"  violations {len(chaos.violations)}", flush=True)
    for line in chaos.violations[:50]:
        print(f"    - {line}", flush=True)
    if len(chaos.violations) > 50:
        print(f"    ... and {len(chaos.violations) - 50} more", flush=True)


if __name__ == "__main__":
    sys.exit(main())
