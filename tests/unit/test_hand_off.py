"""Hand-off, not polling: a chat turn behind its head waits without a message of its own; the head's
settle starts it, and the lost-message sweep starts it if the settle's worker died before it could."""

from __future__ import annotations

import time

import fakeredis
import pytest

from agent.loop.policy import Driver
from agent.provider.scripted import ScriptedProvider, reply_text
from config.settings import Settings
from tasks.execution import wiring
from tasks.execution.flow import Execution, Unit
from tasks.execution.settling import HandOff, Outcome
from tasks.runtime.sweeper import pending_check_seconds, sweep_lost_messages, sweep_once
from tasks.store import keys
from tasks.store.records import UnitRecord

SETTINGS = Settings(redis_url="redis://fake:6379/0", provider="scripted", queue="q", lease_ttl=3,
                    tools="bench.tools:TOOLS", backoff_scale=0)
OWNER = keys.owner("chat", "c1")


class FakeApp:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list, str | None]] = []

    def send_task(self, name, args, task_id=None, queue=None, headers=None):
        self.sent.append((name, args, task_id))
        self.headers = headers


@pytest.fixture
def store(monkeypatch):
    client = fakeredis.FakeRedis()
    monkeypatch.setattr(wiring, "redis_client", lambda url: client)
    monkeypatch.setattr(wiring, "build_provider", lambda s, c, a=None: ScriptedProvider([reply_text("hi")] * 4))
    return client


def _enqueue(store, turn_id: str, status: str = "queued") -> None:
    """What `Client.send_message` writes: the record, the queue entry, the pending mark."""
    rec = UnitRecord(kind="turn", owner_id=OWNER, unit_id=turn_id, text=f"hello {turn_id}", status=status,
                     task_id=f"task-{turn_id}", created_at=time.time())
    store.hset(keys.record(OWNER, turn_id), mapping=rec.to_hash())
    store.rpush(keys.queue(OWNER), turn_id)
    store.zadd(keys.PENDING, {OWNER: time.time()})


def _run(turn_id: str):
    unit = Unit(Driver.CHAT_TURN, OWNER, turn_id)
    return Execution(SETTINGS, unit, hostname="w@test", task_id=f"task-{turn_id}").run()


def _status(store, turn_id: str) -> bytes | None:
    return store.hget(keys.record(OWNER, turn_id), "status")


def test_a_turn_behind_its_head_is_dropped_and_the_heads_settle_starts_it(store):
    """Out of order: t2's message comes first and is dropped, not re-published; t1's settle names t2; t2 then
    runs; a late duplicate of t2 is a no-op; the last turn's settle hands off to nobody."""
    _enqueue(store, "t1")
    _enqueue(store, "t2")
    early = _run("t2")
    assert (early.action, early.countdown) == ("drop", 0.0) and _status(store, "t2") == b'"queued"'
    first = _run("t1")
    assert first.action == "done" and first.hand_off == HandOff(("c1", "t2"), "task-t2", user="")
    second = _run("t2")
    assert second.action == "done" and second.reason == "completed" and second.hand_off is None
    assert _run("t2").reason == "already finished"


def test_a_failed_or_stopped_head_hands_off_too(store):
    """Whatever ends the head (here a stop), its settle starts the next turn."""
    _enqueue(store, "t1")
    _enqueue(store, "t2")
    store.set(keys.stop(OWNER), "t1")
    outcome = _run("t1")
    assert outcome.reason == "stopped" and outcome.hand_off == HandOff(("c1", "t2"), "task-t2", user="")


def test_a_settle_whose_hand_off_was_lost_is_recovered_by_the_lost_message_sweep(store):
    """The worker died between t1's settle and publishing t2: t2 sits queued at the head with no message
    anywhere (its own was dropped). The lost-message sweep republishes t2 under its task id, once; t3, still
    behind t2, is left to t2's own settle."""
    _enqueue(store, "t1")
    _enqueue(store, "t2")
    _enqueue(store, "t3")
    assert _run("t2").action == "drop" and _run("t3").action == "drop"
    assert _run("t1").hand_off is not None  # ... and the process dies before `act` publishes it
    now = time.time() + pending_check_seconds(SETTINGS) + 1
    app = FakeApp()
    assert sweep_lost_messages(store, store, app, SETTINGS, now=now) == [OWNER]
    assert app.sent == [("baton.chat_turn", ["c1", "t2"], "task-t2")]
    assert sweep_lost_messages(store, store, app, SETTINGS, now=now + 1) == []


def test_a_settle_whose_hand_off_was_lost_is_recovered_by_its_own_message_coming_back(store):
    """The same loss on any broker: t1's settle is written, then the store goes away before t2 is read (the worker
    retries t1's message) or the worker dies before publishing t2 (the broker delivers t1's message again). That
    message finds t1 finished and starts t2 itself; on RabbitMQ nothing else would (the sweep cannot see its
    queues: chaos on RabbitMQ under load lost such a turn). A later copy, with t2 running, starts nothing."""
    _enqueue(store, "t1")
    _enqueue(store, "t2")
    assert _run("t2").action == "drop"
    assert _run("t1").hand_off is not None  # ... and lost
    again = _run("t1")
    assert (again.action, again.reason) == ("done", "already finished")
    assert again.hand_off == HandOff(("c1", "t2"), "task-t2", user="")
    assert sweep_lost_messages(store, None, FakeApp(), SETTINGS, now=time.time() + 60) == []  # RabbitMQ: no sweep
    store.hset(keys.record(OWNER, "t2"), "status", '"running"')
    assert _run("t1").hand_off is None


def test_a_turn_the_sweep_gives_up_on_starts_the_next(store):
    """A running head whose worker was lost past the interruption limit is failed by the sweep, which then
    starts the chat's next turn as a settle would."""
    _enqueue(store, "t1", status="running")
    _enqueue(store, "t2")
    store.hset(keys.record(OWNER, "t1"), "interruptions", str(SETTINGS.max_interruptions))
    store.zadd(keys.ACTIVE, {OWNER: time.time() - 10})
    app = FakeApp()
    assert sweep_once(store, app, SETTINGS) == []
    assert _status(store, "t1") == b'"failed"'
    assert app.sent == [("baton.chat_turn", ["c1", "t2"], "task-t2")]


def test_a_copy_that_read_the_record_before_its_unit_finished_does_not_run_it_again(store, monkeypatch):
    """A duplicate delivery reads the record while a finished turn still heads the queue, so it clears that
    head and takes the lease in a round trip of its own (the one path where the record is not read with the
    lease). Meanwhile the original runs to its settle and frees the lease. The copy gets the lease, but must see
    the record changed and hand the unit back, not run it a second time from what it read before (a second
    user message, provider call and completion)."""
    _enqueue(store, "t0", status="completed")  # finished, not yet cleared from the head
    _enqueue(store, "t1")
    take_lease = Execution._take_lease
    raced: list[str] = []

    def the_original_finishes_first(self, rec, lease):
        if not raced:  # the copy, between its record read and its lease: the original runs to its settle
            raced.append("racing")
            raced[0] = _run("t1").reason
        return take_lease(self, rec, lease)

    monkeypatch.setattr(Execution, "_take_lease", the_original_finishes_first)
    copy = _run("t1")
    assert raced == ["completed"]
    assert copy.action == "defer"  # decided again on its next delivery, where it finds the turn finished
    assert store.llen(keys.transcript(OWNER)) == 2  # the user's message and the reply, once each
    completions = [e for _, e in store.xrange(keys.events(OWNER)) if b"turn.completed" in e[b"e"]]
    assert len(completions) == 1
    assert not store.exists(keys.lease(OWNER))  # the copy gave back the lease it took
    monkeypatch.setattr(Execution, "_take_lease", take_lease)
    assert (_run("t1").action, _run("t1").reason) == ("done", "already finished")


def _refused(returned: int | None = None):
    """A task whose hand-off publish the broker refuses (kombu's retries spent), its message returned `returned`
    times before (a quorum queue's `x-delivery-count`; None: the header absent, as on a Redis broker)."""
    from celery.app.task import Context
    from kombu.exceptions import OperationalError

    class Refused:
        request = Context({"id": "task-t1"} if returned is None else {"id": "task-t1", "x-delivery-count": returned})

        def apply_async(self, **_options):
            raise OperationalError("[Errno 104] Connection reset by peer")

    return Refused()


def test_a_hand_off_the_broker_refused_sends_the_settled_turns_message_back_to_make_it_again(monkeypatch):
    """The broker refuses the publish of t2, and the send of t1's message back for later too (it refuses everything)
    while this worker's consumer still works: t1's message is rejected with requeue instead of acknowledged, and its
    next delivery (the test above) starts t2. Shown red with the old handler, which logged and let the message be
    acknowledged: nothing was raised."""
    from celery.exceptions import Reject

    from tasks.drivers import acting

    paused: list[float] = []
    monkeypatch.setattr(acting, "_pause", paused.append)
    hand_off = HandOff(("c1", "t2"), "task-t2", user="")
    for returned in (None, 0, 1, 3, 19):
        with pytest.raises(Reject) as rejected:
            acting.act(_refused(returned), Outcome("done", "completed", hand_off=hand_off))
        assert rejected.value.requeue
    # Not at once: a broker that keeps refusing would get it back and refuse it again at the speed of a round trip
    # (and RabbitMQ 4.0 would dead-letter it on its twentieth return, within the same second). The wait grows with
    # each return the broker counted (red while it stayed at 1 s: [1.0, 1.0, 1.0, 1.0, 1.0]).
    assert paused == [1.0, 1.0, 2.0, 8.0, 10.0]


def test_a_refused_hand_offs_message_is_sent_back_for_later_as_a_new_one_holding_no_slot(monkeypatch):
    """The broker refuses the publish of t2 but takes one to t1's own queue: t1's message is published again with
    the wait as its countdown and the refusal counted in a header, and the delivered one acknowledged (`Ignore`).
    No wait is spent in the pool slot, and the queue never counts a return (RabbitMQ 4.0's delivery limit of 20
    dead-lettered the message that carries the hand-off, red before: `Reject` with requeue after the wait, every
    time). The count it came back with sets the next wait."""
    from celery.app.task import Context
    from celery.exceptions import Ignore
    from kombu.exceptions import OperationalError

    from tasks.drivers import acting

    paused: list[float] = []
    monkeypatch.setattr(acting, "_pause", paused.append)
    sent: list[dict] = []

    class OnlyItsOwnQueue:
        def __init__(self, headers: dict) -> None:
            self.request = Context({"id": "task-t1", "args": ["c1", "t1"], "kwargs": {},
                                    "delivery_info": {"routing_key": "baton"}, **headers})

        def apply_async(self, **options):
            if options["task_id"] == "task-t2":
                raise OperationalError("refused: reject-publish")
            sent.append(options)

    hand_off = HandOff(("c1", "t2"), "task-t2", user="u1", queue="gpu")
    for headers in ({"baton_user": "u1"}, {"baton_user": "u1", acting.REFUSALS_HEADER: 1},
                    {acting.REFUSALS_HEADER: 3, "x-delivery-count": 1}):
        with pytest.raises(Ignore):
            acting.act(OnlyItsOwnQueue(headers), Outcome("done", "completed", hand_off=hand_off))
    assert paused == []
    assert [(o["task_id"], o["args"], o["queue"]) for o in sent] == [("task-t1", ["c1", "t1"], "baton")] * 3
    assert [o["countdown"] for o in sent] == [1.0, 2.0, 8.0]
    assert [o["headers"] for o in sent] == [
        {"baton_user": "u1", acting.REFUSALS_HEADER: 1},
        {"baton_user": "u1", acting.REFUSALS_HEADER: 2},
        {acting.REFUSALS_HEADER: 4},
    ]


@pytest.mark.parametrize(
    ("returned", "pause"),
    [(None, 1.0), ("3", 1.0), (True, 1.0), (-2, 1.0), (0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (4, 10.0), (10**6, 10.0)],
)
def test_the_wait_before_a_refused_hand_offs_message_goes_back_doubles_with_its_returns_up_to_ten_seconds(
    returned, pause
):
    from tasks.drivers.acting import refused_hand_off_pause

    assert refused_hand_off_pause(returned) == pause


def test_twenty_returns_of_a_refused_hand_offs_message_span_minutes_not_seconds():
    """RabbitMQ 4.0's default delivery limit (20) dead-letters the message that carries the hand-off: what it takes
    to get there, the broker refusing every time."""
    from tasks.drivers.acting import refused_hand_off_pause

    assert sum(refused_hand_off_pause(n) for n in range(20)) == 175.0
