"""Under gevent's patched `select`, trio is marked absent before the SDK's HTTP stack imports it."""

from __future__ import annotations

import sys
import types

import pytest

from tasks.runtime.gevent_compat import keep_trio_out_under_gevent


def _monkey(patched: bool) -> types.ModuleType:
    module = types.ModuleType("gevent.monkey")
    module.is_module_patched = lambda name: patched and name == "select"  # type: ignore[attr-defined]
    return module


@pytest.mark.parametrize(("monkey", "loaded", "blocked"), [
    (_monkey(True), False, True),    # the gevent pool, trio not imported yet: marked absent
    (_monkey(False), False, False),  # gevent imported but nothing patched (a library using it): left alone
    (None, False, False),            # prefork, threads: left alone
    (_monkey(True), True, False),    # trio already loaded (before the patch): left as it is
])
def test_trio_is_marked_absent_only_under_gevent_s_patched_select(monkeypatch, monkey, loaded, blocked):
    if monkey is None:
        monkeypatch.delitem(sys.modules, "gevent.monkey", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "gevent.monkey", monkey)
    fake_trio = types.ModuleType("trio")
    monkeypatch.setitem(sys.modules, "trio", fake_trio)  # recorded, so whatever the test leaves is undone
    if not loaded:
        del sys.modules["trio"]
    assert keep_trio_out_under_gevent() is blocked
    if blocked:
        with pytest.raises(ImportError):  # what httpcore2 catches, taking trio for not installed
            import trio  # noqa: F401
    elif loaded:
        assert sys.modules["trio"] is fake_trio
    else:
        assert "trio" not in sys.modules


def test_a_blocking_call_from_gevent_s_hub_runs_in_a_greenlet_of_its_own():
    """gevent runs signal handlers as hub callbacks: the drain flag's Redis write made there raised
    BlockingSwitchOutError, so the flag was never set. Passed on, it runs as soon as the hub is free."""
    gevent = pytest.importorskip("gevent")
    from gevent.event import Event

    from tasks.runtime.gevent_compat import call_off_the_hub

    done, errors = Event(), []

    def blocking() -> None:
        gevent.sleep(0.001)  # a switch out, as any blocking socket call under the patch
        done.set()

    def from_the_hub() -> None:
        try:
            call_off_the_hub(blocking)
        except Exception as err:  # BlockingSwitchOutError, had it run here
            errors.append(err)

    gevent.get_hub().loop.run_callback(from_the_hub)
    assert done.wait(timeout=5) and errors == []
    call_off_the_hub(done.clear)  # outside the hub: called at once
    assert not done.is_set()
