"""What the take asked for a unit's first model call, as the first reservation and admission on its thread take it
(tasks/store/preflight.py, tasks/store/ahead.py): once, for the same keys, while fresh, and never past a call that
needs the round trip anyway."""

from __future__ import annotations

import time

import pytest

from tasks.store import preflight
from tasks.store.preflight import AHEAD_SECONDS, Asked, Deferred, Preflight

KEYS = ["budget:user:ann", "budget:chat:c1", "held:chat:c1"]
ADMITTED = [1]


def asked(*, at: float | None = None, no_budget: bool | None = True, admission: object = ADMITTED) -> Asked:
    return Asked("rate:e:state", admission, tuple(KEYS), no_budget, time.monotonic() if at is None else at)


def test_the_first_reservation_and_admission_take_what_the_take_read_once():
    p = Preflight()
    p.asked(asked())
    assert p.no_budget(KEYS) is True
    assert p.admitted("rate:e:state") == ADMITTED
    assert p.no_budget(KEYS) is False  # spent: a later attempt asks
    assert p.admitted("rate:e:state") is None


def test_other_keys_ask_and_spend_what_was_asked():
    p = Preflight()
    p.asked(asked())
    assert p.no_budget(["budget:user:bob", *KEYS[1:]]) is False  # the record's user is not the message's
    assert p.admitted("rate:other:state") is None  # started as another agent or model
    assert p.admitted("rate:e:state") is None  # spent by the first admission, whichever endpoint it was for


def test_a_budget_that_exists_is_reserved_and_its_reservation_takes_the_round_trip():
    p = Preflight()
    p.asked(asked(no_budget=False))
    assert p.no_budget(KEYS) is False
    p.defer(Deferred(script=None, keys=[], args=[], answer=lambda reply: None))  # type: ignore[arg-type]
    assert p.admitted("rate:e:state") is None  # the reservation needs the trip: the admission goes in it


def test_a_lead_waiting_takes_the_round_trip():
    p = Preflight()
    p.asked(asked())
    p.lead(object())  # type: ignore[arg-type]
    assert p.admitted("rate:e:state") is None


def test_what_was_asked_goes_stale(monkeypatch):
    p = Preflight()
    p.asked(asked(at=time.monotonic() - AHEAD_SECONDS - 0.01))
    assert p.no_budget(KEYS) is False
    assert p.admitted("rate:e:state") is None


@pytest.mark.parametrize("failed", ["admission", "budgets"])
def test_a_read_that_failed_is_asked_again(failed):
    p = Preflight()
    p.asked(asked(admission=None) if failed == "admission" else asked(no_budget=None))
    if failed == "admission":
        assert p.no_budget(KEYS) is True
        assert p.admitted("rate:e:state") is None
    else:
        assert p.no_budget(KEYS) is False
        assert p.admitted("rate:e:state") == ADMITTED


def test_forget_drops_it_at_the_end_of_an_execution():
    p = Preflight()
    p.asked(asked())
    p.forget()
    assert p.no_budget(KEYS) is False and p.admitted("rate:e:state") is None


def test_the_process_has_one_preflight_per_thread():
    import threading

    preflight.PREFLIGHT.asked(asked())
    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append(preflight.PREFLIGHT.admitted("rate:e:state")))
    thread.start()
    thread.join()
    assert seen == [None]  # another thread's unit never takes it
    assert preflight.PREFLIGHT.admitted("rate:e:state") == ADMITTED
