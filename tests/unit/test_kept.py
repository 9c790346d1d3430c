"""Chats and runs a product keeps, lists and deletes: the key registry, the delete script, listing pages."""

from __future__ import annotations

import inspect
import json

import fakeredis
import pytest

from tasks.client import core, kept
from tasks.store import deletion, keys, listing
from tasks.store.enqueue import Enqueue
from tasks.store.records import UnitRecord


@pytest.fixture(params=[False, True], ids=["plain", "cluster"])
def layout(request):
    keys.use_cluster(request.param)
    yield request.param
    keys.use_cluster(False)


@pytest.fixture
def store():
    return fakeredis.FakeRedis()


def _dummy(param: inspect.Parameter) -> object:
    return 3 if param.annotation in (int, "int") else "u-1"


def test_every_key_under_a_units_base_is_registered_for_deletion(layout):
    """A function of keys.py that builds a key of one chat or run (under `base`) must be in `UNIT_KEYS`, the
    registry deletion enumerates: a key kind added without it fails here instead of outliving deletions."""
    owner = keys.owner("chat", "c1")
    stray = []
    for name, fn in inspect.getmembers(keys, inspect.isfunction):
        if fn.__module__ != keys.__name__ or name.startswith("_") or name == "base":
            continue
        params = list(inspect.signature(fn).parameters.values())
        if not params or params[0].name != "owner_id" or any(p.default is not p.empty for p in params):
            continue
        built = fn(owner, *(_dummy(p) for p in params[1:]))
        if isinstance(built, str) and built.startswith(keys.base(owner)) and name not in keys.UNIT_KEYS:
            stray.append(name)
    assert stray == []
    assert {"transcript", "events", "record", "journal", "live", "approvals", "round_slot"} <= set(keys.UNIT_KEYS)


def _turn(store, owner: str, turn_id: str, *, user: str | None = None, status: str = "completed", gen: int = 0,
          now: float = 100.0, text: str = "hello") -> None:
    rec = UnitRecord(kind="turn", owner_id=owner, unit_id=turn_id, text=text, task_id=f"task-{turn_id}", user=user,
                     created_at=now)
    Enqueue(store)(store, owner, turn_id, rec.to_hash(), "{}", now, if_failed=False)
    store.hset(keys.record(owner, turn_id), mapping={"status": json.dumps(status), "generation": str(gen)})


def _every_key_of(store, owner: str, units: dict[str, int]) -> None:
    """One key of every registered kind: each owner key, each unit's, each generation's up to the unit's."""
    built = []
    for scope, build in keys.UNIT_KEYS.values():
        if scope == "owner":
            built.append(build(owner))
        for unit, gen in units.items():
            if scope == "unit":
                built.append(build(owner, unit))
            elif scope == "generation":
                built += [build(owner, unit, g) for g in range(gen + 1)]
    for key in built:
        store.set(key, "x", nx=True)  # the turn list and records the enqueue wrote stay what they are


def _index_members(store) -> set[str]:
    found = set()
    for key in store.scan_iter():
        if store.type(key) == b"zset":
            found |= {m.decode() for m in store.zrange(key, 0, -1)}
        elif store.type(key) == b"set":
            found |= {m.decode() for m in store.smembers(key)}
    return found


def test_deleting_a_chat_leaves_no_key_of_it_and_no_index_entry(store, layout):
    owner = keys.owner("chat", "c1")
    _turn(store, owner, "t1", user="alice", gen=2)
    _turn(store, owner, "t2", user="bob", gen=0)
    _every_key_of(store, owner, {"t1": 2, "t2": 0})
    store.zadd(keys.active(owner), {owner: 1})
    store.zadd(keys.approval_due(owner), {json.dumps([owner, "t1", "toolu_1"]): 1})
    store.hset(keys.record(owner, "t1"), "approvals", json.dumps([{"tool_use_id": "toolu_1", "name": "n"}]))
    store.zadd(keys.delta_trim(owner), {json.dumps([owner, "t2", int((100.0 - 60) * 1000)]): 5})
    other = keys.owner("chat", "c2")
    _turn(store, other, "t9", user="alice")
    kept = {k for k in store.scan_iter() if b"c2" in k}
    assert deletion.delete(store, owner) == deletion.Deleted(deleted=True)
    assert {k for k in store.scan_iter() if b"c1" in k} == set()
    assert not any("c1" in m for m in _index_members(store))
    assert {k for k in store.scan_iter() if b"c2" in k} == kept  # the other chat is untouched, and its entries
    assert {m for m in _index_members(store) if "c2" in m} == {other}
    assert deletion.delete(store, owner) == deletion.Deleted(deleted=False)  # idempotent


@pytest.mark.parametrize("status", ["queued", "running", "waiting"])
def test_a_busy_chat_is_not_deleted(store, status):
    owner = keys.owner("chat", "c1")
    _turn(store, owner, "t1")
    _turn(store, owner, "t2", status=status)
    assert deletion.delete(store, owner) == deletion.Deleted(busy="t2")
    assert store.exists(keys.record(owner, "t1"), keys.turns(owner)) == 2


def test_deleting_a_run_removes_its_record_and_listing_entries(store, layout):
    rec = core.new_run("goal", "/tmp", "r1", 50.0, user="alice")
    rec.status = "failed"
    store.hset(keys.record(rec.owner_id, "r1"), mapping=rec.to_hash())
    for index in kept.run_indexes(rec):
        store.zadd(index, {rec.owner_id: 50.0})
    store.sadd(keys.runs(rec.owner_id), "r1")  # what releases before listing wrote
    assert deletion.delete(store, rec.owner_id).deleted
    assert list(store.scan_iter()) == []


def test_pages_list_newest_activity_first_with_a_cursor_and_per_user(store, layout):
    for i in range(7):
        _turn(store, keys.owner("chat", f"c{i}"), f"t{i}", user="alice" if i % 2 else "bob", now=100.0 + i,
              text=f"  question\n number {i} " + "x" * 100)
    _turn(store, keys.owner("chat", "c0"), "t0b", user="carol", now=200.0)  # c0 is bob's still: its first message
    seen, before = [], None
    while True:
        page = listing.read_page(store, "chat", None, 3, before)
        seen += [item["id"] for item in page.items]
        assert len(page.items) <= 3
        if page.next is None:
            break
        before = page.next
    assert seen == ["c0", "c6", "c5", "c4", "c3", "c2", "c1"]
    first = listing.read_page(store, "chat", None, 1, None).items[0]
    assert first == {"id": "c0", "user": "bob", "agent": "default", "title": "question number 0 " + "x" * 62,
                     "created_at": 100.0, "last_at": 200.0, "status": "completed", "turns": 2}
    assert [i["id"] for i in listing.read_page(store, "chat", "alice", 50, None).items] == ["c5", "c3", "c1"]
    assert [i["id"] for i in listing.read_page(store, "chat", "bob", 50, None).items] == ["c0", "c6", "c4", "c2"]
    assert listing.read_page(store, "chat", "carol", 50, None).items == []


def test_a_cursor_is_checked():
    with pytest.raises(core.ValidationError):
        kept.page_args("chat", None, 10, "nonsense")
    with pytest.raises(core.ValidationError):
        kept.page_args("chat", None, 10, "12.5~run:r1")
    with pytest.raises(core.ValidationError):
        kept.page_args("chat", "has blank", 10, None)
    assert kept.page_args("chat", None, 1000, "12.5~chat:c1") == (None, 200, "12.5~chat:c1")


@pytest.mark.parametrize("given", ["1796489767.8478234", "1.7964897678478234e+9", "1.7964897678478234E+09"])
def test_a_pages_next_names_its_score_exactly_and_safe_in_a_query_string(given):
    """However the score came (as Redis prints it, or as redis-py 8.2's `%.17g`), `next` names the same double in
    the shortest text, with no `+` a query string would read as a space."""
    nxt = listing.merge([[("chat:a", given), ("chat:b", "1.0")]], 1, None)[1]
    assert nxt is not None and "+" not in nxt and " " not in nxt
    score, _, owner = nxt.partition("~")
    assert (float(score), owner) == (float(given), "chat:a") and score == "1796489767.8478234"
