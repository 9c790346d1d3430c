"""The budgets' marks (tasks/store/budget_marks.py): what a model call's preflight reads on a cluster, how it reads the
replies, and the sweep's pass that marks budgets an earlier Baton set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tasks.store import ahead, budget_marks, keys
from tasks.store.ahead import Ask, no_budget

BUDGET_KEYS = ["baton:{budgets}:budget:user:dana", "baton:{budgets}:held:chat:c1"]


@pytest.fixture
def cluster_layout() -> Iterator[None]:
    keys.use_cluster(True)
    try:
        yield
    finally:
        keys.use_cluster(False)


@pytest.fixture(autouse=True)
def _mark_seen_restored() -> Iterator[None]:
    before = ahead._MARK_SEEN[0]
    yield
    ahead._MARK_SEEN[0] = before


@pytest.mark.parametrize(
    ("mark", "exists", "expected"),
    [
        (None, 0, True),  # one Redis: the keys' answer
        (None, 2, False),
        (0, None, True),  # no mark on the unit's shard: no budget anywhere
        (1, None, None),  # a mark, the keys not asked: the reservation asks
        (1, 0, True),  # a mark, and the keys say none of the unit's exists
        (1, 1, False),
        (0, 1, False),  # a budget without its marks (an earlier Baton's, before the sweep marked it): the keys win
        (0, ConnectionError("x"), True),
        (ConnectionError("x"), None, None),  # an error reply: the reservation asks
        (None, ConnectionError("x"), None),
    ],
)
def test_whether_no_budget_exists_is_read_from_the_keys_else_from_an_absent_mark(mark, exists, expected):
    assert no_budget(mark, exists) is expected


def sent(ask: Ask) -> list[tuple[Any, ...]]:
    calls, _ = ahead._reads(None, ask)  # type: ignore[arg-type]  # no admission: the client is not used
    return [c.command for c in calls]


def test_on_one_redis_the_budget_keys_are_asked_as_before():
    assert sent(Ask(None, BUDGET_KEYS)) == [("EXISTS", *BUDGET_KEYS)]


def test_on_a_cluster_the_mark_is_asked_and_the_keys_only_while_the_last_mark_read_was_there(cluster_layout):
    mark = keys.budgets_mark("chat:c1")
    ask = Ask(None, BUDGET_KEYS, mark)
    assert sent(ask) == [("EXISTS", mark), ("EXISTS", *BUDGET_KEYS)]  # a process starts as if it had seen one

    _, shape = ahead._reads(None, ask)  # type: ignore[arg-type]
    assert ahead._answered(ask, shape, [0, 0], 1.0).no_budget is True
    assert sent(ask) == [("EXISTS", mark)]  # no mark seen: only the mark, on the unit's own master

    _, shape = ahead._reads(None, ask)  # type: ignore[arg-type]
    got = ahead._answered(ask, shape, [1], 2.0)
    assert got.no_budget is None and got.budget_keys == tuple(BUDGET_KEYS)  # set since: the reservation asks
    assert sent(ask) == [("EXISTS", mark), ("EXISTS", *BUDGET_KEYS)]


def test_each_shard_has_its_mark_on_its_own_slot_and_one_redis_has_none(cluster_layout):
    marks = keys.budgets_marks()
    assert len(marks) == keys.SHARDS == len(set(marks))
    assert keys.budgets_mark("chat:c1") == marks[keys.shard("chat:c1")]
    assert keys.budgets_mark("chat:c1").split("}")[0] == keys.drain("h", "chat:c1").split("}")[0]  # the unit's tag
    keys.use_cluster(False)
    assert keys.budgets_mark("chat:c1") == "" and keys.budgets_marks() == []


class FakeCluster:
    """What the marks' upkeep and `mark_all` call, counted: a pipeline's EXISTS and SET are answered at `execute`."""

    def __init__(self, kept: int, flag: bool = False) -> None:
        self.kept = kept
        self.values: dict[str, str] = {keys.BUDGETS_MARKED: "1"} if flag else {}
        self.asked_slots: list[int] = []
        self.order: list[str] = []
        self.looked = 0  # marks looked at (EXISTS in a pipeline)
        self._queued: list[tuple[str, str]] = []

    def exists(self, key: str) -> int:
        if self._piping:
            self._queued.append(("exists", key))
            return 0
        return int(key in self.values)

    def cluster_countkeysinslot(self, slot: int) -> int:
        self.asked_slots.append(slot)
        if self.kept < 0:
            raise redis.exceptions.NoPermissionError("NOPERM this user has no permissions to run the 'cluster' command")
        return self.kept

    def set(self, key: str, value: str) -> None:
        if self._piping:
            self._queued.append(("set", key))
            return
        self.values[key] = value
        self.order.append(key)

    _piping = False

    def pipeline(self, transaction: bool) -> FakeCluster:
        self._piping, self._queued = True, []
        return self

    def execute(self) -> list[int]:
        self._piping = False
        out = []
        for op, key in self._queued:
            if op == "set":
                self.set(key, "1")
                out.append(1)
            else:
                self.looked += 1
                out.append(self.exists(key))
        return out


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_sweep_marks_every_shard_then_the_flag_once_the_budgets_slot_keeps_anything(cluster_layout):
    clock = Clock()
    upkeep = budget_marks.Upkeep(every=60, clock=clock)
    store = FakeCluster(kept=0)
    assert upkeep.keep(store) is False and store.order == []
    assert store.asked_slots == [budget_marks.budgets_slot()]
    assert budget_marks.budgets_slot() == keys.key_slot(keys.budget("user:dana").encode())

    store.kept = 3  # a budget an earlier Baton set
    assert upkeep.keep(store) is True
    assert store.order == [*keys.budgets_marks(), keys.BUDGETS_MARKED]  # the flag last: it says every mark is set
    assert upkeep.keep(store) is False and len(store.asked_slots) == 2  # flagged: the slot is not counted again


def test_once_flagged_every_mark_is_checked_each_minute_and_one_lost_is_set_again(cluster_layout):
    clock = Clock()
    upkeep = budget_marks.Upkeep(every=60, clock=clock)
    store = FakeCluster(kept=3, flag=True)
    for key in keys.budgets_marks():
        store.values[key] = "1"
    assert upkeep.keep(store) is False and store.looked == keys.SHARDS and store.asked_slots == []
    clock.now += 59
    assert upkeep.keep(store) is False and store.looked == keys.SHARDS  # not yet
    del store.values[keys.budgets_marks()[17]]  # a failover lost it
    clock.now += 2
    assert upkeep.keep(store) is True and store.values[keys.budgets_marks()[17]] == "1"


def test_an_acl_that_refuses_cluster_marks_as_if_a_budget_were_kept(cluster_layout):
    store = FakeCluster(kept=-1)
    assert budget_marks.Upkeep().keep(store) is True and store.order[-1] == keys.BUDGETS_MARKED


def test_on_one_redis_there_is_nothing_to_mark():
    store = FakeCluster(kept=3)
    assert budget_marks.Upkeep().keep(store) is False and store.order == [] and store.asked_slots == []
    budget_marks.mark_all(store)
    assert store.order == []
