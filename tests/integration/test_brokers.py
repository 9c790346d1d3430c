"""The broker-facing guarantees on both brokers: Redis, and RabbitMQ (a private rabbitmq-server node).

A turn and a coding run, a duplicate delivery, a SIGTERM drain and a SIGKILL recovery run on each (`broker_stack`
is parametrized; the short chaos run is parametrized the same way in test_chaos_short.py); poison messages on
RabbitMQ are dead-lettered by the broker itself (on Redis: test_hostile_input.py). The consumer-timeout scenario
is in test_rabbitmq_timeout.py, on a node of its own with the timeout in seconds.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import re
import time
import uuid

import pytest
import redis
from kombu import Connection, Exchange, Producer

from config.topology import dead_letter_queue, dead_letter_queue_name
from tasks.store import keys
from tests.support import counting_tools
from tests.support.fake_anthropic import Fault, Script, failing, text, tool_call
from tests.support.processes import wait_until
from tests.support.rabbitmq import RabbitMQNode

pytestmark = pytest.mark.integration


@pytest.fixture(params=["redis", "amqp"])
def broker_stack(request):
    """The test's stack with Redis as the broker, then with the module's RabbitMQ node as the broker."""
    return request.getfixturevalue("stack" if request.param == "redis" else "amqp_stack")

STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking about it for a long time"))
DEADLETTER = "baton:deadletter"


def _redis(stack) -> redis.Redis:
    return redis.Redis.from_url(stack.redis_server.url, socket_timeout=None)


def test_a_turn_and_a_coding_run_complete(broker_stack, tmp_path):
    """Two chat turns sent back to back (the second deferred behind the first, a countdown through the broker)
    complete in order, and a coding run (a write tool, then a reply) completes, the write once."""
    stack = broker_stack
    stack.fake_api.set_handler(
        Script([text("first"), text("second"), tool_call("record_note", {"note": "n"}), text("ran")])
    )
    stack.worker("a")
    client = stack.client()
    refs = [client.send_message("amqp-chat", "hi"), client.send_message("amqp-chat", "and then")]
    results = [client.wait(ref, timeout=60) for ref in refs]
    assert [(r.status, r.reply) for r in results] == [("completed", "first"), ("completed", "second")]
    status = client.wait(client.start_run("write a note", workspace=tmp_path), timeout=60)
    assert status.status == "completed" and status.reply == "ran"
    assert counting_tools.calls(_redis(stack), "record_note") == 1


def test_the_same_turn_delivered_twice_runs_once(broker_stack):
    """A duplicate delivery of a turn (its message published again under the same task id while the turn runs)
    executes the turn once; a late duplicate of the finished turn is a no-op too."""
    stack = broker_stack
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "dup"}), text("done once")]))
    worker = stack.worker()
    client = stack.client()
    r = _redis(stack)
    ref = client.send_message("c3", "do it once")
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None
    client._celery.send_task("baton.chat_turn", args=["c3", ref.turn_id], task_id=ref.task_id, queue=stack.queue)
    r.rpush(counting_tools.RELEASE_KEY, "go")
    assert client.wait(ref, timeout=30).status == "completed"
    late = client._celery.send_task("baton.chat_turn", args=["c3", ref.turn_id], queue=stack.queue)
    # The unit tasks store no Celery result (the record is the result): the worker's log says how it ended.
    wait_until(lambda: f"[{late.id}] succeeded in" in worker.log(), 30, what="the late duplicate to end")
    assert "'already finished'" in next(line for line in worker.log().splitlines() if f"[{late.id}] succeeded" in line)
    assert counting_tools.calls(r, "blocking_write") == 1
    assert stack.fake_api.request_count == 2
    assert [e.type for e in client.events("c3")].count("turn.completed") == 1
    transcript = client.transcript("c3")
    assert [m.role for m in transcript] == ["user", "assistant", "user", "assistant"]  # asked, tool round, reply
    assert [len(m.tool_uses) for m in transcript] == [0, 1, 0, 0]


def test_over_amqp_a_lost_hand_off_is_made_by_the_settled_turns_message_coming_back(amqp_stack):
    """t2 waits behind t1 with no message of its own; t1's settle is written but its hand-off of t2 is lost (here:
    t2 reads as running while t1 settles, so the settle starts nobody; in the chaos run that found it, Redis was
    killed between the settle and the hand-off). On RabbitMQ the lost-message sweep cannot see the queue, and t2's
    only way to start is t1's message coming back (a retry after the store error, a redelivery after a SIGKILL):
    it finds t1 finished and starts t2."""
    stack = amqp_stack
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "one"}), text("first"), text("second")]))
    worker = stack.worker()
    client = stack.client()
    r = _redis(stack)
    first = client.send_message("lost-hand-off", "one")
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None
    second = client.send_message("lost-hand-off", "two")
    t2 = keys.record(keys.owner("chat", "lost-hand-off"), second.turn_id)
    assert r.hget(t2, "status") == b'"queued"'
    r.hset(t2, "status", '"running"')
    r.rpush(counting_tools.RELEASE_KEY, "go")
    assert client.wait(first, timeout=30).reply == "first"
    # The settle reads the next turn after its write: t1's task is over only once the worker logs it.
    wait_until(lambda: f"[{first.task_id}] succeeded in" in worker.log(), 30, what="t1's task to end")
    r.hset(t2, "status", '"queued"')  # settled, and nobody started t2: the hand-off is lost

    client._celery.send_task("baton.chat_turn", args=["lost-hand-off", first.turn_id], task_id=first.task_id,
                             queue=stack.queue)
    assert client.wait(second, timeout=30).reply == "second"
    assert stack.fake_api.request_count == 3


def test_over_amqp_a_hand_off_the_broker_refuses_is_made_again_once_it_takes_publishes(amqp_stack,
                                                                                      rabbitmq: RabbitMQNode):
    """The broker itself refuses t1's hand-off of t2: the work queue is over a length limit whose overflow is
    `reject-publish`, so RabbitMQ nacks the publish (publisher confirms are on) while the consumer keeps its
    channel. t1's message goes back to the queue instead of being acknowledged, comes back, finds t1 finished and
    tries again, and t2 answers once the limit is gone. Acknowledged instead, t1's message would take the hand-off
    with it and t2 would wait for good: nothing sweeps RabbitMQ's queues."""
    stack = amqp_stack
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "one"}), text("first"), text("second")]))
    worker = stack.worker(concurrency=1)  # prefetch 1: while t1 runs, the worker takes nothing else
    client = stack.client()
    r = _redis(stack)
    first = client.send_message("refused-hand-off", "one")
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None
    second = client.send_message("refused-hand-off", "two")  # queued behind t1: no message of its own yet
    no_room = json.dumps({"max-length": 0, "overflow": "reject-publish"})
    assert rabbitmq.ctl_call("set_policy", "--apply-to", "queues", "baton-no-room", f"^{stack.queue}$",
                             no_room).returncode == 0
    try:
        # A quorum queue refuses publishes once it is over its limit: one ready message puts it there (a ping,
        # which the worker runs harmlessly once it is free).
        client._celery.send_task("baton.ping", queue=stack.queue)  # confirmed: in the queue when this returns
        r.rpush(counting_tools.RELEASE_KEY, "go")
        assert client.wait(first, timeout=30).reply == "first"
        refused = f"could not start the next turn ('refused-hand-off', '{second.turn_id}')"
        wait_until(lambda: refused in worker.log(), 30, what="the broker to refuse the hand-off")
    finally:
        assert rabbitmq.ctl_call("clear_policy", "baton-no-room").returncode == 0
    assert client.wait(second, timeout=30).reply == "second"
    assert stack.fake_api.request_count == 3
    assert counting_tools.calls(r, "blocking_write") == 1
    assert f"[{first.task_id}] succeeded in" in worker.log()  # its message came back and was then acknowledged


def test_over_amqp_turns_for_an_agent_with_its_own_queue_reach_the_workers_serving_it(amqp_stack):
    """`queued` names a queue of its own, whose workers declare it as every work queue (quorum, dead-lettering, on a
    topic exchange). The client's publish to it, and a settle's hand-off of the chat's next turn, declare it the same
    way: red before, when Celery declared a queue it was not configured with on a direct exchange and RabbitMQ
    refused the send (PRECONDITION_FAILED, inequivalent arg 'type' for exchange)."""
    from tests.support.published import wait_for_agents

    stack = amqp_stack
    special = f"{stack.queue}-agent"
    fleet = {"BATON_AGENTS": "tests.support.agents_fleet:AGENTS", "BATON_TEST_AGENT_QUEUE": special}
    stack.fake_api.set_handler(Script([text("served on its queue"), text("and the next turn")]))
    stack.worker("own", **fleet, BATON_QUEUE=special)
    client = stack.client(BATON_TEST_AGENT_QUEUE=special)
    assert wait_for_agents(client, "queued")["queued"]["queue"] == special
    first = client.send_message("agent-queue", "hi", agent="queued")
    second = client.send_message("agent-queue", "more")  # the chat keeps its agent: published, or handed off
    done = client.wait(first, timeout=60)
    assert (done.status, done.reply, done.agent) == ("completed", "served on its queue", "queued")
    after = client.wait(second, timeout=60)
    assert (after.status, after.reply, after.agent) == ("completed", "and the next turn", "queued")


def test_over_amqp_a_worker_given_an_agents_queue_by_dash_q_serves_it_and_keeps_its_dead_letters(
        amqp_stack, rabbitmq: RabbitMQNode):
    """The README's other way to serve an agent's queue: `-Q <queue>` with the default `BATON_QUEUE`. The worker
    declares the queue as a work queue (quorum, dead-lettering, topic exchange: the countdowns' delayed delivery
    needs one) and its dead-letter queue (red before: only `BATON_QUEUE`'s was declared, so the broker dropped that
    queue's dead letters), and serves the agent's turn."""
    from tests.support.published import wait_for_agents

    stack = amqp_stack
    special = f"{stack.queue}-by-q"
    fleet = {"BATON_AGENTS": "tests.support.agents_fleet:AGENTS", "BATON_TEST_AGENT_QUEUE": special}
    stack.fake_api.set_handler(Script([text("served by -Q")]))
    stack.worker("by-q", consume=special, **fleet)
    client = stack.client(BATON_TEST_AGENT_QUEUE=special)
    wait_for_agents(client, "queued")
    done = client.wait(client.send_message("by-q", "hi", agent="queued"), timeout=60)
    assert (done.status, done.reply, done.agent) == ("completed", "served by -Q", "queued")
    queues = rabbitmq.queues()
    assert queues[special]["type"] == "quorum"
    assert queues[special]["arguments"]["x-dead-letter-exchange"] == "baton.deadletter"
    assert queues[dead_letter_queue_name(special)]["type"] == "quorum"


def test_over_amqp_a_worker_whose_queue_was_declared_another_way_stops_saying_what_to_do_and_the_upgrade_works(
        amqp_stack):
    """An agent's queue declared the way Celery declares a queue it was not configured with (a direct exchange, a
    classic queue: an earlier Baton's `-Q` workers did): a worker consuming it stops, exit code 1, naming the queue
    and the README's upgrade (red before: "Connection to broker lost", reconnecting a hundred times a second for
    ever, never consuming). A client's send to the agent meanwhile is refused by the broker: the turn is failed as
    retryable and `Unavailable` says so (red before: the amqp error raised out of the send, the turn left queued
    without a message, and every later turn of the chat behind it). Then the upgrade itself: the queue and its
    exchange deleted (over AMQP here; the README names `rabbitmqctl` and `rabbitmqadmin`), a worker starts on it,
    and the failed turn, retried, and the chat's next one are answered there."""
    from kombu import Queue

    from tasks.client import Unavailable
    from tests.support.published import wait_for_agents

    stack = amqp_stack
    special = f"{stack.queue}-before"
    fleet = {"BATON_AGENTS": "tests.support.agents_fleet:AGENTS", "BATON_TEST_AGENT_QUEUE": special}
    old = Queue(special, Exchange(special, type="direct"), routing_key=special)
    with Connection(stack.env["BATON_BROKER_URL"]) as conn:
        old(conn.default_channel).declare()
    with pytest.raises(RuntimeError, match="exited with 1") as stopped:
        stack.worker("before", consume=special, **fleet)
    assert f"the queue {special} is declared on the broker another way" in str(stopped.value)
    assert f"rabbitmqctl delete_queue {special}" in str(stopped.value)

    stack.worker("default", **fleet)  # the fleet's workers on the default queue: they publish the agents
    client = stack.client(**fleet)
    wait_for_agents(client, "queued")
    with pytest.raises(Unavailable, match=r"refused it: .*PRECONDITION_FAILED") as unsent:
        client.send_message("upgraded", "hi", agent="queued")
    said = re.search(r"turn (t-\w+) was not started; it is failed, retryable \(baton retry upgraded\)",
                     str(unsent.value))
    assert said is not None, str(unsent.value)
    failed = client.turn("upgraded", said[1])
    assert failed.status == "failed"
    assert failed.failure is not None and failed.failure["class"] == "infra_transient"
    assert failed.failure["retryable"] and "refused" in failed.failure["message"]

    async def send_async() -> str:
        async with stack.async_client(**fleet) as ac:
            with pytest.raises(Unavailable, match=r"refused it: .*PRECONDITION_FAILED") as refused:
                await ac.send_message("upgraded-async", "hi", agent="queued")
            return str(refused.value)

    said = re.search(r"turn (t-\w+) was not started; it is failed", asyncio.run(send_async()))
    assert said is not None and client.turn("upgraded-async", said[1]).status == "failed"

    with Connection(stack.env["BATON_BROKER_URL"]) as conn:
        bound = old(conn.default_channel)
        bound.delete()
        bound.exchange.delete()
    stack.fake_api.set_handler(Script([text("served after the upgrade"), text("and the next one")]))
    stack.worker("after", consume=special, **fleet)
    done = client.wait(client.retry("upgraded"), timeout=60)
    assert (done.status, done.reply, done.agent) == ("completed", "served after the upgrade", "queued")
    after = client.wait(client.send_message("upgraded", "more"), timeout=60)
    assert (after.status, after.reply, after.agent) == ("completed", "and the next one", "queued")


def test_over_amqp_a_hand_off_refused_again_and_again_waits_longer_each_time_the_message_came_back(
        amqp_stack, rabbitmq: RabbitMQNode):
    """t2 names an agent with a queue of its own, which no worker consumes yet and which is over a `reject-publish`
    length limit (one ping waiting in it): every hand-off of t2 is refused, and t1's message comes back each time,
    sent again with the refusals counted. It comes back after 1, then 2, then 4 s (red while the wait was a fixed
    second: 1, 1, 1). t1's queue has a delivery limit of 1 (a policy, as RabbitMQ 4.0's default of 20 but sooner):
    the returns never count against it, each being a new message, so nothing is dead-lettered (red while the
    message went back with a reject: dead-lettered on its second return, t2 left queued for good). Once the limit
    is gone and a worker serves the agent's queue, the next return makes the hand-off and t2 answers there, the
    write tool having run once."""
    stack = amqp_stack
    special = f"{stack.queue}-own"
    fleet = {"BATON_AGENTS": "tests.support.agents_fleet:HELD_THEN_QUEUED", "BATON_TEST_AGENT_QUEUE": special}
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "one"}), text("first"), text("second")]))
    worker = stack.worker("default", concurrency=1, **fleet)
    assert rabbitmq.ctl_call("set_policy", "--apply-to", "queues", f"limit-{stack.queue}", f"^{stack.queue}$",
                             '{"delivery-limit": 1}').returncode == 0
    client = stack.client(BATON_TEST_AGENT_QUEUE=special)
    r = _redis(stack)
    first = client.send_message("refused-again", "one")
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None
    second = client.send_message("refused-again", "two", agent="queued")  # behind t1, for the agent's queue
    client._celery.send_task("baton.ping", queue=special)  # declares the queue; confirmed: waiting in it
    no_room = json.dumps({"max-length": 0, "overflow": "reject-publish"})
    assert rabbitmq.ctl_call("set_policy", "--apply-to", "queues", "baton-no-room-own", f"^{special}$",
                             no_room).returncode == 0
    waits = re.compile(rf"could not start the next turn \('refused-again', '{second.turn_id}'\).*?"
                       r"make the hand-off again in (\d+) s")
    try:
        r.rpush(counting_tools.RELEASE_KEY, "go")
        assert client.wait(first, timeout=30).reply == "first"
        wait_until(lambda: len(waits.findall(worker.log())) >= 3, 60, what="three refusals of the hand-off")
    finally:
        assert rabbitmq.ctl_call("clear_policy", "baton-no-room-own").returncode == 0
    assert waits.findall(worker.log())[:3] == ["1", "2", "4"]
    stack.worker("own", **fleet, BATON_QUEUE=special)
    done = client.wait(second, timeout=60)
    assert (done.status, done.reply, done.agent) == ("completed", "second", "queued")
    assert stack.fake_api.request_count == 3
    assert counting_tools.calls(r, "blocking_write") == 1
    queues = rabbitmq.queues()
    assert queues[stack.queue]["policy"] == f"limit-{stack.queue}"  # the limit was in force all along
    assert int(queues[dead_letter_queue_name(stack.queue)]["messages"]) == 0


def test_over_amqp_the_work_queue_is_a_quorum_queue_with_a_dead_letter_queue(amqp_stack, rabbitmq: RabbitMQNode):
    """The worker declares the work queue as a quorum queue dead-lettering into `<queue>.deadletter` (declared
    too); a turn leaves nothing behind in it."""
    stack = amqp_stack
    stack.fake_api.set_handler(Script([text("hello over rabbit")]))
    stack.worker("a")
    client = stack.client()
    assert client.wait(client.send_message("amqp-chat", "hi"), timeout=60).status == "completed"
    queues = rabbitmq.queues()
    work = queues[stack.queue]
    assert work["type"] == "quorum"
    assert work["arguments"]["x-dead-letter-exchange"] == "baton.deadletter"
    assert queues[dead_letter_queue_name(stack.queue)]["type"] == "quorum"
    rabbitmq.wait_for_messages(stack.queue, 0)


def test_a_sigterm_drain_requeues_at_once_and_another_worker_finishes_each_write_once(broker_stack, tmp_path, request):
    """SIGTERM on the worker mid-run: it drains within 5 s, its requeue is published at once (on RabbitMQ: no
    countdown through the delayed queues), the other worker resumes and finishes the run, each write once."""
    stack = broker_stack
    stack.fake_api.set_handler(
        Script([tool_call("record_note", {"note": "a"}), tool_call("record_note", {"note": "b"}), STALL, text("done")])
    )
    worker_a = stack.worker("a")
    client = stack.client()
    ref = client.start_run("two notes", workspace=tmp_path)
    assert stack.fake_api.wait_for_requests(3, timeout=30)
    stack.worker("b")
    started = time.monotonic()
    worker_a.terminate()
    worker_a.wait_exit(timeout=15)
    drained = time.monotonic() - started
    assert stack.fake_api.wait_for_requests(4, timeout=30)
    resumed = time.monotonic() - started
    status = client.wait(ref, timeout=60)
    assert status.status == "completed" and status.reply == "done" and status.interruptions == 1
    assert drained <= 5.0, f"drain took {drained:.2f}s"
    assert counting_tools.calls(_redis(stack), "record_note") == 2
    assert stack.fake_api.requests[3]["messages"] == stack.fake_api.requests[2]["messages"]
    broker = request.node.callspec.params["broker_stack"]
    print(f"\n{broker} drain: worker exited {drained:.2f}s after SIGTERM; the other worker resumed at {resumed:.2f}s")


def test_a_sigkilled_workers_run_is_recovered_by_the_lease_sweep(broker_stack, tmp_path, request):
    """SIGKILL the worker holding a run: the other worker's lease sweep requeues the unit within 1.5 lease TTLs
    (RabbitMQ also returns the message at once, its connection closed: that copy finds the lease still held and
    is dropped); the write runs once and the run completes once."""
    stack = broker_stack
    ttl = 3.0
    env = {"BATON_LEASE_TTL": str(ttl)}
    stack.fake_api.set_handler(Script([tool_call("record_note", {"note": "x"}), STALL, text("recovered")]))
    worker_a = stack.worker("a", **env)
    client = stack.client(**env)
    ref = client.start_run("survive a crash", workspace=tmp_path)
    assert stack.fake_api.wait_for_requests(2, timeout=30)
    stack.worker("b", **env)
    killed = time.monotonic()
    worker_a.kill9()
    assert stack.fake_api.wait_for_requests(3, timeout=30)
    recovered = time.monotonic() - killed
    status = client.wait(ref, timeout=60)
    assert status.status == "completed" and status.reply == "recovered"
    assert counting_tools.calls(_redis(stack), "record_note") == 1
    causes = [e.model_extra["cause"] for e in client.events(ref.run_id) if e.type == "run.interrupted"]
    assert causes == ["worker_lost"]
    assert [e.type for e in client.events(ref.run_id)].count("run.completed") == 1
    assert recovered <= 1.5 * ttl, f"resumed {recovered:.2f}s after SIGKILL (lease TTL {ttl}s)"
    broker = request.node.callspec.params["broker_stack"]
    print(f"\n{broker} SIGKILL: the run resumed {recovered:.2f}s after the kill (lease TTL {ttl:.0f}s)")


def _publish_raw(url: str, queue: str, body: bytes, content_type: str, task: str = "baton.chat_turn") -> str:
    task_id = str(uuid.uuid4())
    headers = {"lang": "py", "task": task, "id": task_id, "root_id": task_id, "parent_id": None, "group": None,
               "argsrepr": "()", "kwargsrepr": "{}", "origin": "test", "retries": 0, "eta": None, "expires": None}
    with Connection(url) as conn:
        # The work queue's own topic exchange, already declared by the worker: declare nothing here.
        producer = Producer(conn.channel(), exchange=Exchange(queue, type="topic"), routing_key=queue,
                            auto_declare=False)
        producer.publish(body, content_type=content_type, content_encoding="binary", headers=headers,
                         serializer=None, declare=[])
    return task_id


def _dead_letters(url: str, queue: str, expected: int, timeout: float = 30) -> list[dict]:
    """Read (and acknowledge) `expected` raw messages from the dead-letter queue, without decoding them."""
    got: list[dict] = []

    def on_message(message) -> None:
        got.append({"id": message.headers.get("id"), "death": message.headers.get("x-death"), "body": message.body})
        message.ack()

    deadline = time.monotonic() + timeout
    with Connection(url) as conn, conn.Consumer(dead_letter_queue(queue), on_message=on_message, prefetch_count=10):
        while len(got) < expected:
            conn.drain_events(timeout=max(0.1, deadline - time.monotonic()))
    return got


def test_poison_messages_are_dead_lettered_on_the_broker_and_the_worker_stays_healthy(amqp_stack, rabbitmq,
                                                                                       tmp_path):
    """A pickle, malformed JSON, an unknown task and arguments that fail validation are each rejected: recorded
    in baton:deadletter and dead-lettered whole into `<queue>.deadletter` by RabbitMQ (never dropped, never
    executed, never redelivered); afterwards the same worker completes a normal turn."""
    stack = amqp_stack
    stack.fake_api.set_handler(Script([text("still healthy")]))
    worker = stack.worker()
    r = _redis(stack)
    ids = [
        _publish_raw(rabbitmq.url, stack.queue, pickle.dumps((("x",), {}, {})),
                     "application/x-python-serialize"),
        _publish_raw(rabbitmq.url, stack.queue, b"{not json", "application/json"),
    ]
    client = stack.client()
    ids.append(client._celery.send_task("baton.no_such_task", args=[1], queue=stack.queue).id)
    ids.append(client._celery.send_task("baton.chat_turn", args=["bad id!", 7], queue=stack.queue).id)

    letters = _dead_letters(rabbitmq.url, stack.queue, expected=4)
    assert sorted(letter["id"] for letter in letters) == sorted(ids)
    assert all(letter["death"] and letter["death"][0]["reason"] == "rejected" for letter in letters)
    reasons = [json.loads(raw)["reason"] for raw in r.lrange(DEADLETTER, 0, -1)]
    assert len(reasons) == 4
    assert any("untrusted" in x.lower() or "refus" in x.lower() or "pickle" in x for x in reasons)
    assert any("unknown task" in x for x in reasons) and any("validation" in x for x in reasons)

    result = client.wait(client.send_message("healthy", "are you there?"), timeout=30)
    assert result.status == "completed" and result.reply == "still healthy"
    assert worker.alive
    rabbitmq.wait_for_messages(dead_letter_queue_name(stack.queue), 0)  # we read all four



def test_drains_never_count_against_the_quorum_queues_delivery_limit(amqp_stack, rabbitmq: RabbitMQNode, tmp_path):
    """With a delivery limit of 1 on the work queue (a policy), a run drained three times is still resumed each
    time and completes: a drain publishes a new message rather than returning the old one, so only Baton's own
    interruption counter (here 5) bounds it; nothing is dead-lettered."""
    stack = amqp_stack
    done = rabbitmq.ctl_call("set_policy", "--apply-to", "queues", f"limit-{stack.queue}",
                             f"^{stack.queue}$", '{"delivery-limit": 1}')
    assert done.returncode == 0, done.stderr
    env = {"BATON_MAX_INTERRUPTIONS": "5"}
    stack.fake_api.set_handler(Script([STALL, STALL, STALL, text("finally")]))
    client = stack.client(**env)
    ref = client.start_run("drained thrice", workspace=tmp_path)
    for attempt in range(1, 4):
        worker = stack.worker(f"d{attempt}", **env)
        assert stack.fake_api.wait_for_requests(attempt, timeout=30)
        worker.terminate()
        worker.wait_exit(timeout=15)
    stack.worker("last", **env)
    status = client.wait(ref, timeout=60)
    assert status.status == "completed" and status.reply == "finally" and status.interruptions == 3
    queues = rabbitmq.queues()
    assert queues[stack.queue]["policy"] == f"limit-{stack.queue}"  # the limit was in force all along
    assert int(queues[dead_letter_queue_name(stack.queue)]["messages"]) == 0
