"""Baton's store on a real 3-master Redis Cluster, with a separate Redis as the broker.

One private cluster serves the module (each test uses chats and runs of its own); each test has its own
broker, fake provider and workers. What is proved here is what a cluster changes: every unit's writes stay
on one slot (a cross-slot script fails with CROSSSLOT), the sharded indexes keep single flight, recovery of a
lost worker and approval expiry, live text reaches `baton serve`, and a master's restart is followed. The
rest of the suite proves the same code on a single Redis.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from agent.messages import DEPLOY_NOTICE
from tasks.store import keys
from tasks.store.direct import SentAhead
from tasks.store.fenced import Batch, Fence
from tests.conftest import Stack
from tests.support import counting_tools
from tests.support.fake_anthropic import FakeMessagesServer, Fault, Reply, Script, failing, text, tool_call
from tests.support.live_text import assistant_texts, fold
from tests.support.processes import RedisServer, wait_until
from tests.support.redis_cluster import PrivateCluster, find_cluster_binaries, key_slot
from tests.support.web_server import ApiServer

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("cluster")]

STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking about it for a long time"))
SLOW = {"pace": 0.2, "parts": 20}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    if find_cluster_binaries() is None:
        pytest.skip("no Redis 7 redis-server and redis-cli (Debian: apt-get install redis-server; .ci/run does)")
    with PrivateCluster(tmp_path_factory.mktemp("cluster"), masters=3) as started:
        yield started


@pytest.fixture(autouse=True)
def _plain_layout_after() -> Iterator[None]:
    # A client built here lays this process's keys out for the cluster; the next module's tests expect one Redis.
    yield
    keys.use_cluster(False)


@pytest.fixture
def cstack(cluster: PrivateCluster, redis_server: RedisServer, fake_api: FakeMessagesServer,
           tmp_path: Path) -> Iterator[Stack]:
    """A Stack whose store is the cluster; the broker, and the counting tools' counters, are `redis_server`."""
    s = Stack(redis_server, fake_api, tmp_path)
    s.env.update(
        {
            "BATON_REDIS_CLUSTER": cluster.startup_nodes,
            "BATON_REDIS_URL": f"redis://127.0.0.1:{cluster.masters()[0].port}/0",  # the password's place only
            "BATON_BROKER_URL": redis_server.url,
            "BATON_TEST_COUNTER_URL": redis_server.url,
        }
    )
    yield s
    s.stop()


def _store(cluster: PrivateCluster) -> redis.Redis:
    nodes = [ClusterNode("127.0.0.1", int(a.rpartition(":")[2])) for a in cluster.startup_nodes.split(",")]
    return RedisCluster(startup_nodes=nodes)  # type: ignore[return-value]


def _counter(stack: Stack) -> redis.Redis:
    return redis.Redis.from_url(stack.redis_server.url)


def _tool_then(call: Reply, answer: Reply):
    """A handler for many conversations at once: each calls the tool, then answers once the result is in."""

    def handle(body: dict, index: int) -> Reply:
        blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
        return answer if any(b.get("type") == "tool_result" for b in blocks) else call

    return handle


def _chats_on_every_master(cluster: PrivateCluster, prefix: str, per_master: int = 2) -> list[str]:
    """Chat ids whose keys land on each master in turn (found by hashing, as the store will place them)."""
    keys.use_cluster(True)
    wanted = {m.port: per_master for m in cluster.masters()}
    chats: list[str] = []
    n = 0
    while any(wanted.values()):
        chat = f"{prefix}-{n}"
        n += 1
        port = cluster.master_for_slot(key_slot(keys.record(keys.owner("chat", chat), "x"))).port
        if wanted[port]:
            wanted[port] -= 1
            chats.append(chat)
    return chats


def test_a_tool_round_on_every_master_writes_each_unit_on_one_slot(cstack, cluster):
    """Chats on all three masters each run a write tool once and answer; every key a chat's turn wrote, its
    shards of the indexes included, is on one slot (a script touching two would have failed: CROSSSLOT)."""
    cstack.fake_api.set_handler(_tool_then(tool_call("record_note", {"note": "cluster"}), text("noted")))
    cstack.worker(concurrency=4, pool="threads")
    client = cstack.client()
    chats = _chats_on_every_master(cluster, "round")
    refs = [client.send_message(chat, f"note for {chat}") for chat in chats]
    for ref in refs:
        assert client.wait(ref, timeout=60).reply == "noted"
    assert counting_tools.calls(_counter(cstack), "record_note") == len(chats)
    store = _store(cluster)
    for chat in chats:
        owner = keys.owner("chat", chat)
        written = [k for m in cluster.masters() for k in redis.Redis(port=m.port).keys(f"*:{owner}:*")]
        slots = {key_slot(k) for k in written} | {key_slot(keys.pending(owner)), key_slot(keys.active(owner))}
        assert len(written) >= 5 and len(slots) == 1, (chat, written)
        calls = [m for m in client.transcript(chat) if m.role == "assistant"]
        assert calls[-1].text == "noted"
    # The chats' keys are spread: every master holds some.
    assert all(redis.Redis(port=m.port).dbsize() > 0 for m in cluster.masters())
    assert store.ping()


def test_one_turn_at_a_time_per_chat_across_two_workers(cstack):
    """Four messages to one chat, two workers of four threads: each request carries every answer before it,
    so no two of its turns ever ran at once."""
    slow = Reply([{"type": "text", "text": "an answer"}], pace=0.02, parts=5)
    cstack.fake_api.set_handler(lambda body, index: slow)
    cstack.worker("a", concurrency=4, pool="threads")
    cstack.worker("b", concurrency=4, pool="threads")
    client = cstack.client()
    refs = [client.send_message("single", f"message {i}") for i in range(4)]
    for ref in refs:
        assert client.wait(ref, timeout=60).status == "completed"
    lengths = sorted(len(r["messages"]) for r in cstack.fake_api.requests)
    assert lengths == [1, 3, 5, 7]


def test_a_sigterm_drain_hands_the_turn_to_the_other_worker(cstack):
    """A deploy on the cluster: the drained turn finishes on the other worker with one reply."""
    cstack.fake_api.set_handler(Script([STALL, text("the one reply")]))
    worker_a = cstack.worker("a")
    client = cstack.client()
    ref = client.send_message("drain-c", "hello")
    assert cstack.fake_api.wait_for_requests(1, timeout=30)
    cstack.worker("b")
    worker_a.terminate()
    worker_a.wait_exit(timeout=15)
    result = client.wait(ref, timeout=60)
    assert result.status == "completed" and result.reply == "the one reply"
    assert [m.text for m in client.transcript("drain-c") if m.role == "assistant"] == ["the one reply"]


def test_a_sigkilled_worker_is_recovered_by_the_sweep_and_no_write_runs_twice(cstack, tmp_path):
    """SIGKILL mid-run: the other worker's sweep finds the unit in its shard of the active index and resumes
    it; the write tool before the kill ran once."""
    ttl = 3.0
    env = {"BATON_LEASE_TTL": str(ttl)}
    cstack.fake_api.set_handler(Script([tool_call("record_note", {"note": "a"}), STALL, text("all done")]))
    worker_a = cstack.worker("a", **env)
    client = cstack.client(**env)
    ref = client.start_run("write a note", workspace=tmp_path)
    assert cstack.fake_api.wait_for_requests(2, timeout=30)
    worker_a.kill9()
    killed = time.monotonic()
    cstack.worker("b", **env)
    status = client.wait(ref, timeout=60)
    assert status.status == "completed" and status.reply == "all done", status
    print(f"cluster: SIGKILL recovered and finished {time.monotonic() - killed:.1f}s after the kill")
    assert status.interruptions == 1
    assert counting_tools.calls(_counter(cstack), "record_note") == 1
    notices = [m.text for m in client.transcript(ref.run_id) if m.role == "notice"]
    assert DEPLOY_NOTICE.format(attempt=1, max_attempts=3) in notices


def test_approvals_on_the_cluster_run_once_when_approved_and_expire_as_denied(cstack):
    """One chat's call is approved and runs once; another's is left undecided and the sweep denies it."""
    cstack.fake_api.set_handler(_tool_then(tool_call("deploy", {"env": "prod"}, id="toolu_deploy"), text("finished")))
    cstack.worker(BATON_APPROVAL_TTL="2", BATON_LEASE_TTL="4")
    client = cstack.client()
    approved, expired = client.send_message("ok-c", "ship it"), client.send_message("late-c", "ship it")
    for ref in (approved, expired):
        assert client.wait(ref, timeout=30).waiting_reason == "approval"
    client.approve("ok-c", "toolu_deploy", by="alice")
    assert client.wait(approved, timeout=30).reply == "finished"
    wait_until(lambda: client.turn("late-c", expired.turn_id).status == "completed", 30, interval=0.2,
               what="the sweep to expire the approval and the turn to finish")
    denied = [e for e in client.events("late-c") if e.type == "tool.denied"]
    assert denied and denied[0].model_extra["reason"] == "approval expired"
    assert counting_tools.calls(_counter(cstack), "deploy") == 1


def test_live_text_reaches_baton_serve_from_the_cluster(cstack, tmp_path):
    """A browser's SSE stream from `baton serve` on the cluster folds to the transcript's answer."""
    slow = Reply([{"type": "text", "text": "A slow answer streamed from a cluster."}], **SLOW)
    cstack.fake_api.set_handler(Script([slow]))
    cstack.worker()
    api = ApiServer(dict(cstack.env), tmp_path).start()
    try:
        with api.stream("/api/chats/live-c/stream") as s:
            assert api.post("/api/chats/live-c/messages", {"text": "hi"})[0] == 202
            messages = s.read_until(lambda m: m.event in ("turn.completed", "turn.failed"))
        assert api.request("GET", "/healthz") == (200, {"status": "ok"})  # every master answers
        status, transcript = api.request("GET", "/api/chats/live-c/transcript")
        assert status == 200 and len(transcript) == 2, transcript
    finally:
        api.stop()
    assert messages[-1].event == "turn.completed"
    assert sum(m.event == "text.delta" for m in messages) > 1
    folded = fold([m.data for m in messages])
    assert list(folded.texts.values()) == list(assistant_texts(cstack.client().transcript("live-c")).values())
    assert list(folded.texts.values()) == ["A slow answer streamed from a cluster."]


def test_a_master_killed_and_restarted_mid_run_is_followed(cstack, cluster, tmp_path):
    """kill -9 of the master that holds a run's slot while the run streams, then its restart (AOF): the worker
    follows the node back without a restart, the run finishes, and its write tool ran once."""
    slow = Reply([{"type": "text", "text": "streaming while a master restarts"}], pace=0.25, parts=16)
    cstack.fake_api.set_handler(Script([tool_call("record_note", {"note": "before"}), slow, text("done")]))
    cstack.worker()
    client = cstack.client()
    ref = client.start_run("write, then talk", workspace=tmp_path, run_id="restart-r")
    assert cstack.fake_api.wait_for_requests(2, timeout=30)
    master = cluster.master_for_slot(key_slot(keys.record(keys.owner("run", "restart-r"), "restart-r")))
    master.kill9()
    started = time.monotonic()
    master.restart()
    cluster.wait_ok()
    print(f"cluster: master {master.port} back {time.monotonic() - started:.1f}s after kill -9")
    status = client.wait(ref, timeout=90)
    assert status.status == "completed", status
    assert counting_tools.calls(_counter(cstack), "record_note") == 1
    wait_until(lambda: client.run_status("restart-r").status == "completed", 5)


class _CountingApp:
    """Stands in for the Celery app a sweep publishes through: counts what it would send."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send_task(self, name: str, args: list[str], **_: object) -> None:
        self.sent.append(args[0])


def test_one_sweep_visits_every_shard_of_the_active_index(cstack):
    """A lost running turn in each of the 64 shards (running, no lease, a heartbeat older than the lease): one
    pass of the recovery sweep requeues every one of them, each once."""
    from tasks.runtime.sweeper import sweep_once

    client = cstack.client(BATON_QUEUE=f"{cstack.queue}-nowhere")  # sends that no worker takes
    settings = client.settings
    keys.use_cluster(True)
    chats: dict[int, str] = {}
    n = 0
    while len(chats) < keys.SHARDS:
        chat = f"lost-{n}"
        n += 1
        chats.setdefault(keys.shard(keys.owner("chat", chat)), chat)
    stale = time.time() - 10 * settings.lease_ttl
    for chat in chats.values():
        ref = client.send_message(chat, "hello")
        owner = keys.owner("chat", chat)
        client.redis.hset(keys.record(owner, ref.turn_id), "status", '"running"')
        client.redis.zadd(keys.active(owner), {owner: stale})
    app = _CountingApp()
    recovered = sweep_once(client.redis, app, settings)  # type: ignore[arg-type]
    assert sorted(recovered) == sorted(keys.owner("chat", c) for c in chats.values())
    assert sorted(app.sent) == sorted(chats.values())


def test_a_sweeps_read_of_an_index_gives_every_shards_entries_and_follows_a_moved_shard(cluster):
    """A sweep reads an index's 64 shards in one round trip, each master's shards straight on one of its connections:
    every shard's entries come back, each score as text that reads back as the same number (a sweep compares it back
    in a script), at most `limit` a shard. One shard's slot then moves to another master while the client's slot
    map still names the old one (MOVED): that shard is read again through the cluster's client, nothing missed."""
    from tasks.store import indexes

    store = _store(cluster)
    keys.use_cluster(True)
    name = f"{keys.PREFIX}:sweep-read-test"
    shard_keys = keys.shards(name)
    for i, key in enumerate(shard_keys):
        store.zadd(key, {f"m{i}-early": 5, f"m{i}-odd": 1733500000.1 + i / 7, f"m{i}-later": 9e9})

    def read(until: float, limit: int | None = None) -> list[tuple[str, str, float]]:
        return [(key, member.decode(), score) for key in shard_keys
                for member, score in store.zrangebyscore(key, "-inf", until, start=0 if limit else None, num=limit,
                                                         withscores=True)]

    def exact(entries: list[tuple[str, str, str]]) -> list[tuple[str, str, float]]:
        back = [float(score) for _, _, score in entries]
        assert [repr(b) for b in back] == [score for _, _, score in entries]
        return [(key, member, b) for (key, member, _), b in zip(entries, back, strict=True)]

    try:
        expected = read(2e9)
        assert len(expected) == 2 * keys.SHARDS
        assert exact(indexes.due(store, name, 2e9)) == expected
        assert exact(indexes.due(store, name, 2e9, limit=1)) == read(2e9, limit=1)
        assert indexes.count(store, name) == 3 * keys.SHARDS

        moved = key_slot(shard_keys[5])
        source = cluster.master_for_slot(moved)
        cluster.move_slot(moved, next(m for m in cluster.masters() if m.port != source.port))
        assert exact(indexes.due(store, name, 2e9)) == expected  # the client's map still had the old master
        assert indexes.count(store, name) == 3 * keys.SHARDS
    finally:
        for key in shard_keys:
            store.delete(key)
        store.close()


def test_a_master_failover_is_followed_and_the_write_confirmed_before_it_runs_once(
    redis_server: RedisServer, fake_api: FakeMessagesServer, tmp_path: Path
):
    """A cluster with a replica per master. A run's write tool is mid-call when its slot's master is killed and
    the replica promoted: the write-ahead entry had been confirmed by that master's replica (WAIT on the
    master's own connection), so the run completes on the same worker, never restarted, with the write run
    once and its outcome stating the failover. A chat whose master did not fail over says nothing of it."""
    if find_cluster_binaries() is None:
        pytest.skip("no Redis 7 redis-server and redis-cli (Debian: apt-get install redis-server; .ci/run does)")
    from tasks.store.failover import FAILOVER_NOTICE

    with PrivateCluster(tmp_path / "replicated", masters=3, replicas=1) as replicated:
        stack = Stack(redis_server, fake_api, tmp_path)
        stack.env.update({
            "BATON_REDIS_CLUSTER": replicated.startup_nodes,
            "BATON_REDIS_URL": f"redis://127.0.0.1:{replicated.masters()[0].port}/0",
            "BATON_BROKER_URL": redis_server.url,
            "BATON_TEST_COUNTER_URL": redis_server.url,
        })
        counter = redis.Redis.from_url(redis_server.url, socket_timeout=None)
        try:
            fake_api.set_handler(_tool_then(tool_call("blocking_write", {"note": "once"}), text("ran")))
            stack.worker("a")
            client = stack.client()
            ref = client.start_run("write across the failover", workspace=tmp_path, run_id="failover-r")
            assert counter.blpop([counting_tools.STARTED_KEY], timeout=30) is not None
            master = replicated.master_for_slot(key_slot(keys.record(keys.owner("run", "failover-r"), "failover-r")))
            started = time.monotonic()
            promoted = replicated.fail_master(master)
            print(f"cluster: replica {promoted.port} promoted {time.monotonic() - started:.1f}s after kill -9")
            counter.rpush(counting_tools.RELEASE_KEY, "go")
            status = client.wait(ref, timeout=90)
            assert status.status == "completed" and status.reply == "ran", status
            assert counting_tools.calls(counter, "blocking_write") == 1
            [result] = [e for e in client.events("failover-r") if e.type == "tool.result"]
            assert not result.model_dump().get("unreplicated")  # a replica was online: the entry waited for it
            [done] = [e for e in client.events("failover-r") if e.type == "run.completed"]
            assert done.model_dump().get("store_failover") is True
            notes = [b.text for m in client.transcript("failover-r") if m.role == "notice" for b in m.content]
            assert FAILOVER_NOTICE in notes
            [other] = [c for c in _chats_on_every_master(replicated, "calm", 1)
                       if replicated.master_for_slot(key_slot(keys.record(keys.owner("chat", c), "x"))) is not promoted
                       ][:1]
            fake_api.set_handler(lambda body, index: text("calm"))
            assert client.wait(client.send_message(other, "hello"), timeout=60).reply == "calm"
            assert not any(e.model_dump().get("store_failover") for e in client.events(other))
        finally:
            stack.stop()


def test_a_slot_moved_to_another_master_mid_turn_is_followed(cstack, cluster):
    """The slot of a streaming chat's shard migrates to another master key batch by key batch (ASK while it
    moves, MOVED after): the turn completes with one answer, the next turn of the chat completes on the new
    master, and every key of the chat is there."""
    slow = Reply([{"type": "text", "text": "streaming while my slot moves"}], pace=0.15, parts=20)
    cstack.fake_api.set_handler(lambda body, index: slow if len(body["messages"]) == 1 else text("after the move"))
    cstack.worker()
    client = cstack.client()
    ref = client.send_message("moving-c", "hello")
    assert cstack.fake_api.wait_for_requests(1, timeout=30)
    owner = keys.owner("chat", "moving-c")
    slot = key_slot(keys.record(owner, ref.turn_id))
    source = cluster.master_for_slot(slot)
    target = next(m for m in cluster.masters() if m.port != source.port)
    cluster.move_slot(slot, target, batch=3)
    first = client.wait(ref, timeout=60)
    assert first.status == "completed" and first.reply == "streaming while my slot moves", first
    second = client.wait(client.send_message("moving-c", "again"), timeout=60)
    assert second.status == "completed" and second.reply == "after the move"
    assert [m.text for m in client.transcript("moving-c") if m.role == "assistant"] == [
        "streaming while my slot moves", "after the move"
    ]
    assert cluster.master_for_slot(slot).port == target.port
    assert redis.Redis(port=target.port).keys(f"*:{owner}:*") and not redis.Redis(port=source.port).keys(f"*:{owner}:*")


def test_the_async_client_sends_and_awaits_a_hundred_turns_at_once_on_the_cluster(cstack):
    """100 turns sent and awaited at once from one loop, then a stream read to its end, through AsyncClient on
    the cluster (its first commands all at once: the slots are learnt before them)."""
    cstack.fake_api.set_handler(lambda body, index: text("async answer"))
    cstack.worker(concurrency=8, pool="threads")

    async def main() -> tuple[list[str], list[str]]:
        async with cstack.async_client() as ac:

            async def one(i: int) -> str:
                return (await ac.wait(await ac.send_message(f"async-{i}", "hello"), timeout=60)).status

            statuses = await asyncio.gather(*(one(i) for i in range(100)))
            seen: list[str] = []
            async for event in ac.stream("async-7"):
                seen.append(event.type)
                if event.type == "turn.completed":
                    break
            return statuses, seen

    statuses, seen = asyncio.run(main())
    assert statuses == ["completed"] * 100
    assert seen[0] == "turn.queued" and "text.delta" in seen and seen[-1] == "turn.completed", seen


def test_one_users_budget_holds_their_chats_on_every_master(cstack, cluster):
    """One user's chats live on all three masters; their budget (every budget key under one hash tag) holds them all
    at once: each turn reserved and settled on the budgets' one slot, and a turn past the limit refused, naming it."""
    cstack.fake_api.set_handler(lambda body, index: text("held"))  # 10 input and 5 output tokens each
    cstack.worker(concurrency=4, pool="threads")
    client = cstack.client()
    client.set_budget("user:dana", tokens=100_000, period="day")
    chats = _chats_on_every_master(cluster, "budget")
    refs = [client.send_message(chat, "hello", user="dana") for chat in chats]
    assert all(client.wait(ref, timeout=60).status == "completed" for ref in refs)
    spent = client.budget("user:dana")
    assert (spent["spent_tokens"], spent["reserved_tokens"]) == (15 * len(chats), 0)
    client.set_budget("user:dana", tokens=spent["spent_tokens"], period="day")
    refused = client.wait(client.send_message(chats[0], "once more", user="dana"), timeout=60)
    assert refused.status == "failed" and refused.failure["class"] == "budget_exceeded", refused
    assert "user:dana" in refused.failure["message"]


def _without_budgets(cluster: PrivateCluster) -> None:
    """No budget, nothing held, no budgets' mark: a store that never had a budget (the module shares one cluster)."""
    keys.use_cluster(True)
    for m in cluster.masters():
        node = redis.Redis(port=m.port)
        doomed = [k for k in node.scan_iter(match="baton:*budgets*", count=1000)]
        for key in doomed:  # one DEL each: the keys are on many slots
            node.delete(key)


def _budget_traffic(entries: list[dict]) -> list[str]:
    """The commands that named a key of the budgets' slot, less the worker's sweeps' (the marks' flag, the holders)."""
    sweeps = {f"EXISTS {keys.BUDGETS_MARKED}", f"SMEMBERS {keys.BUDGET_HOLDERS}"}
    return [e["command"] for e in entries if "{budgets}" in e["command"] and e["command"] not in sweeps]


def _turns_watched(cluster: PrivateCluster, client, chats: list[str], **send: str) -> list[dict]:
    """A turn of each chat ("what is a?", answered "The answer is A."), one after another, and every command the
    masters ran meanwhile (MONITOR, from a marker to a marker)."""
    from tests.support import monitor

    urls = [f"redis://127.0.0.1:{m.port}/0" for m in cluster.masters()]
    probes = [monitor.probe(url) for url in urls]
    watching = [monitor.Monitor(url, address) for url, (_, address) in zip(urls, probes, strict=True)]
    try:
        for probe, _ in probes:
            probe.echo(monitor.START)
        for chat in chats:
            result = client.wait(client.send_message(chat, "what is a?", **send), timeout=60)
            assert result.status == "completed" and result.reply == "The answer is A."
        for probe, _ in probes:
            probe.echo(monitor.END)
    finally:
        for each in watching:
            each.close()
    return [e for each in watching for e in each.seen]


def test_a_fleet_without_budgets_asks_nothing_of_the_budgets_master_and_a_budget_set_counts(cstack, cluster):
    """Every budget is on one slot, so the question "does a budget of this unit exist?", asked before each model
    call, went to the budgets' master, another master for two units in three. With no budget anywhere, the
    turns of chats on every master now name no key of that slot (each reads the budgets' mark on its own slot);
    a budget set then marks every shard first, and the next turns are reserved and charged on it."""
    _without_budgets(cluster)
    cstack.fake_api.set_handler(_tool_then(tool_call("peek", {"key": "a"}), text("The answer is A.")))
    cstack.env["BATON_TOOLS"] = "bench.tools:TOOLS"
    cstack.worker(concurrency=1)
    client = cstack.client()
    chats = _chats_on_every_master(cluster, "unbudgeted")
    assert client.wait(client.send_message("unbudgeted-warm", "what is a?", user="erin"), timeout=60).reply
    seen = _turns_watched(cluster, client, chats, user="erin")
    assert any(e["command"].startswith("EXISTS baton:{") and ":budgets:marked" in e["command"] for e in seen)
    assert _budget_traffic(seen) == []

    client.set_budget("user:erin", tokens=100_000, period="day")
    assert all(_store(cluster).exists(mark) for mark in keys.budgets_marks())
    budgeted = _chats_on_every_master(cluster, "budgeted")  # new chats: each turn calls the tool, then answers
    for chat in budgeted:
        assert client.wait(client.send_message(chat, "what is a?", user="erin"), timeout=60).status == "completed"
    spent = client.budget("user:erin")
    assert (spent["spent_tokens"], spent["reserved_tokens"]) == (30 * len(budgeted), 0)  # two attempts of 15 a turn


def test_a_budget_an_earlier_baton_set_without_marks_is_marked_by_a_starting_worker_and_charged(cstack, cluster):
    """A budget set by a Baton from before the marks (its budget key alone) is found by a new worker's first sweep,
    before it says it is ready: every shard is marked, and the turns that follow are charged on it. A mark lost
    later is set again by a worker's check of them all."""
    from tasks.store import budgets

    _without_budgets(cluster)
    store = _store(cluster)
    now = budgets.now_utc()
    store.eval(budgets.SET, 1, keys.budget("user:fay"), *budgets.set_args("user:fay", None, 100_000, "day", now))
    assert not any(store.exists(mark) for mark in keys.budgets_marks())
    cstack.fake_api.set_handler(lambda body, index: text("held"))  # 10 input and 5 output tokens each
    worker = cstack.worker(concurrency=1)
    assert all(store.exists(mark) for mark in keys.budgets_marks()) and store.exists(keys.BUDGETS_MARKED)
    assert "marked on every shard" in worker.log()
    client = cstack.client()
    chats = _chats_on_every_master(cluster, "old-budget")
    for chat in chats:
        assert client.wait(client.send_message(chat, "hello", user="fay"), timeout=60).status == "completed"
    assert client.budget("user:fay")["spent_tokens"] == 15 * len(chats)

    # A mark lost (a failover can lose a write its replica had not received) while the flag stays: the next worker
    # to start finds it missing in its first pass and marks again.
    lost = keys.budgets_mark(chats[0])
    store.delete(lost)
    cstack.worker("w2", concurrency=1)
    assert store.exists(lost)


def test_the_async_client_marks_every_shard_before_it_sets_a_budget(cstack, cluster):
    _without_budgets(cluster)

    async def main() -> dict:
        async with cstack.async_client() as ac:
            return await ac.set_budget("user:gus", usd=5.0, period="month")

    assert asyncio.run(main())["usd"] == 5.0
    store = _store(cluster)
    assert all(store.exists(mark) for mark in keys.budgets_marks()) and store.exists(keys.BUDGETS_MARKED)


# A turn of one tool round on the cluster, per turn, summed over the masters (its broker is another Redis): 11
# commands sent, measured at this stop (9 EVALSHA: the enqueue, the take, each attempt's budget reservation and rate
# gate (one pipeline), the model step, the tool step, the settle with the last step held; the client's XREAD and
# HGETALL, one pipeline), and 0.75 of room for idle traffic. The INFO before each take and each settle, the look
# after the tool round and the last step's own write were one command each on a cluster before this stop
# (tests/integration/test_turn_cost.py counts one Redis). Since stop 57 the take's transcript is read by an LRANGE
# sent behind its script on the same master (tasks/store/take.py), not by the script: 12 sent.
CLUSTER_SENT_CEILING = 12.75


def test_a_turn_on_the_cluster_stays_under_its_command_ceiling(cstack, cluster):
    from tests.support import monitor

    _without_budgets(cluster)  # as a fleet without budgets: an earlier test's budget would add its reads

    cstack.env["BATON_TOOLS"] = "bench.tools:TOOLS"  # a tool with no I/O: the counts are Baton's own
    cstack.fake_api.set_handler(_tool_then(tool_call("peek", {"key": "a"}), text("The answer is A.")))
    cstack.worker(concurrency=1)
    client = cstack.client()
    chats = _chats_on_every_master(cluster, "cost")
    assert client.wait(client.send_message("cost-warm", "what is a?"), timeout=60).status == "completed"
    sent, _ = monitor.by_kind(_turns_watched(cluster, client, chats))
    assert sum(sent.values()) / len(chats) <= CLUSTER_SENT_CEILING, f"sent per turn: {monitor.shown(sent, len(chats))}"


def _fence_on(store: redis.Redis, tag: str) -> tuple[Fence, str]:
    """A fence whose lease, like a unit's keys, is on the slot of `tag`; and that slot's list of steps."""
    lease, steps = f"{{{tag}}}:lease", f"{{{tag}}}:steps"
    store.set(lease, "tok")
    fence = Fence(store, lease, "tok")
    fence.commit(Batch().add("SET", f"{{{tag}}}:warm", "1"))  # its master has the script
    return fence, steps


def test_a_write_sent_ahead_on_the_cluster_goes_to_its_slot_master_and_is_confirmed_by_the_next_write(cluster):
    """On a cluster a write is sent ahead too, on a connection of the master that holds its slot (before, the
    cluster's client had none to hold and the write waited for its reply): it lands there, and the next commit reads
    its reply before its own goes."""
    store = _store(cluster)
    fence, steps = _fence_on(store, "ahead-c")
    master = redis.Redis(port=cluster.master_for_slot(key_slot(steps)).port)
    evalshas = master.info("commandstats")["cmdstat_evalsha"]["calls"]
    held = SentAhead.hold(store, fence._script, *fence._call(Batch().add("RPUSH", steps, "held")))
    assert held is not None, "nothing was sent ahead on the cluster"
    wait_until(lambda: master.info("commandstats")["cmdstat_evalsha"]["calls"] == evalshas + 1, 10,
               what="the write to reach its slot's master before its reply is read")
    assert held.reply() == [1]
    fence.send_ahead(Batch().add("RPUSH", steps, "answer"))
    assert fence.commit(Batch().add("RPUSH", steps, "result").read("LRANGE", steps, "0", "-1")) == [
        [b"held", b"answer", b"result"]
    ]
    store.close()


def test_a_write_sent_ahead_to_a_slot_that_moved_is_run_once_on_its_new_master(cluster):
    """The client still maps the slot to its old master when the write is sent ahead: that master answers MOVED
    (nothing ran there), and the write is run through the cluster's client, once, on the new master."""
    store = _store(cluster)
    fence, steps = _fence_on(store, "ahead-moved")
    slot = key_slot(steps)
    source = cluster.master_for_slot(slot)
    target = next(m for m in cluster.masters() if m.port != source.port)
    cluster.move_slot(slot, target)
    fence.send_ahead(Batch().add("RPUSH", steps, "answer"))
    assert fence.commit(Batch().read("LRANGE", steps, "0", "-1")) == [[b"answer"]]
    assert redis.Redis(port=target.port).lrange(steps, 0, -1) == [b"answer"]
    store.close()


def _fences_on_every_master(cluster: PrivateCluster, store: redis.Redis, prefix: str) -> list[tuple[Fence, str]]:
    """A fence (and its list of steps) on each master's slots, in the masters' order."""
    found: dict[int, tuple[Fence, str]] = {}
    n = 0
    while len(found) < len(cluster.masters()):
        tag = f"{prefix}-{n}"
        n += 1
        port = cluster.master_for_slot(key_slot(f"{{{tag}}}:steps")).port
        if port not in found:
            found[port] = _fence_on(store, tag)
    return [found[m.port] for m in cluster.masters()]


def test_one_trip_over_every_master_goes_straight_to_each_slots_master_and_runs_each_call_once(cluster, monkeypatch):
    """Three fences' writes, one on each master, in one round trip (the take's and the preflight's shape): each call
    is routed once, by its first key, not by the cluster's client key by key (a fenced write names ten keys and
    more), and each runs once on its slot's master. One master lost its scripts (NOSCRIPT) and one slot moved to
    another master (MOVED): those two are run again through the cluster's client, once each, on the right master."""
    from tasks.store.scripts import scripts_in_one_trip

    store = _store(cluster)
    fenced = _fences_on_every_master(cluster, store, "trip")
    calls = [(fence._script, *fence._call(Batch().add("RPUSH", steps, "a").read("LLEN", steps)))
             for fence, steps in fenced]
    routed: list[bytes] = []
    slot_of = redis.cluster.key_slot

    def counted(key: bytes) -> int:  # every slot redis-py's cluster client works out, its pipelines' too
        routed.append(key)
        return slot_of(key)

    monkeypatch.setattr(redis.cluster, "key_slot", counted)
    assert scripts_in_one_trip(store, calls) == [[1, 1]] * 3
    assert len(routed) == 3, f"keys routed for three calls: {len(routed)}"

    masters = cluster.masters()
    redis.Redis(port=masters[0].port).script_flush()
    moved = key_slot(fenced[1][1])
    cluster.move_slot(moved, masters[2])
    assert scripts_in_one_trip(store, calls) == [[1, 2]] * 3
    for (_, steps), master in zip(fenced, [masters[0], masters[2], masters[2]], strict=True):
        assert redis.Redis(port=master.port).lrange(steps, 0, -1) == [b"a", b"a"], steps
    store.close()


class _Streaming:
    """A unit's buffered live text as the writer sees it: one RPUSH of `text` to its steps, taken once."""

    def __init__(self, fence: Fence, steps: str, text: str) -> None:
        self.fence, self._batch = fence, Batch().add("RPUSH", steps, text)

    def take(self) -> Batch | None:
        batch, self._batch = self._batch, None
        return batch

    def again(self) -> None:
        raise AssertionError("no fence is busy here")


def _script_calls(cluster: PrivateCluster) -> tuple[int, int]:
    """EVAL and EVALSHA calls so far, summed over the masters."""
    stats = [redis.Redis(port=m.port).info("commandstats") for m in cluster.masters()]
    return tuple(sum(s.get(f"cmdstat_{c}", {}).get("calls", 0) for s in stats) for c in ("eval", "evalsha"))  # type: ignore[return-value]


def test_live_text_of_units_on_every_master_goes_as_evalsha_in_one_round(cluster):
    """The live text writer's round over units on three masters: each unit's fenced write goes to its master as
    EVALSHA, not as the whole script (a cluster's pipeline sends EVAL, 3 KB, for every streaming unit every 50 ms).
    A master that lost its scripts is answered by loading it there: the text is written, once."""
    from tasks.execution.live_writer import LiveWriter

    class Rounds(LiveWriter):
        """Rounds made by the test, not by the writer's thread."""

        def ask(self, unit) -> None:  # type: ignore[no-untyped-def, override]
            with self._cv:
                self._asked[id(unit)] = unit

    store = _store(cluster)
    fenced = _fences_on_every_master(cluster, store, "live")
    writer = Rounds(store, interval=0.05)
    evals, evalshas = _script_calls(cluster)
    for fence, steps in fenced:
        writer.ask(_Streaming(fence, steps, "delta"))
    writer.write_round()
    assert _script_calls(cluster) == (evals, evalshas + 3)
    redis.Redis(port=cluster.master_for_slot(key_slot(fenced[0][1])).port).script_flush()
    for fence, steps in fenced:
        writer.ask(_Streaming(fence, steps, "more"))
    writer.write_round()
    for _, steps in fenced:
        assert store.lrange(steps, 0, -1) == [b"delta", b"more"], steps
    store.close()
