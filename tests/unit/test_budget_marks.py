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
    """What `mark_if_kept` and `mark_all` call, counted."""

    def __init__(self, kept: int, flag: bool = False) -> None:
        self.kept, self.values = kept, ({keys.BUDGETS_MARKED: "1"} if flag else {})
        self.asked_slots: list[int] = []
        self.order: list[str] = []

    def exists(self, key: str) -> int:
        return int(key in self.values)

    def cluster_countkeysinslot(self, slot: int) -> int:
        self.asked_slots.append(slot)
        if self.kept < 0:
            raise redis.exceptions.NoPermissionError("NOPERM this user has no permissions to run the 'cluster' command")
        return self.kept

    def set(self, key: str, value: str) -> None:
        self.values[key] = value
        self.order.append(key)

    def pipeline(self, transaction: bool) -> FakeCluster:
        return self

    def execute(self) -> None:
        return None


def test_the_sweep_marks_every_shard_then_the_flag_once_the_budgets_slot_keeps_anything(cluster_layout):
    empty = FakeCluster(kept=0)
    assert budget_marks.mark_if_kept(empty) is False and empty.order == []
    assert empty.asked_slots == [budget_marks.budgets_slot()]
    assert budget_marks.budgets_slot() == keys.key_slot(keys.budget("user:dana").encode())

    kept = FakeCluster(kept=3)
    assert budget_marks.mark_if_kept(kept) is True
    assert kept.order == [*keys.budgets_marks(), keys.BUDGETS_MARKED]  # the flag last: it says every mark is set

    refused = FakeCluster(kept=-1)  # an ACL that does not allow CLUSTER: marked, so nothing is missed
    assert budget_marks.mark_if_kept(refused) is True and refused.order[-1] == keys.BUDGETS_MARKED

    done = FakeCluster(kept=3, flag=True)
    assert budget_marks.mark_if_kept(done) is None and done.asked_slots == [] and done.order == []


def test_on_one_redis_there_is_nothing_to_mark():
    one = FakeCluster(kept=3)
    assert budget_marks.mark_if_kept(one) is None and one.order == []
    budget_marks.mark_all(one)
    assert one.order == []
