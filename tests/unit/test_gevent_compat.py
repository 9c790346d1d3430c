"""Under Celery's gevent pool: trio marked absent before the SDK's HTTP stack imports it, kombu's retry waits
cooperative, and a blocking call from the hub moved off it."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from tasks.runtime.gevent_compat import keep_trio_out_under_gevent
from tests.support.processes import REPO


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


# What `celery worker -P gevent` does first: choose the pool (importing kombu) and patch; then a retry's wait.
_RETRY_UNDER_THE_POOL = """
import sys
fixed = sys.argv[-1] == "fixed"
sys.argv = ["celery", "-A", "tasks", "worker", "-P", "gevent"]
from celery import maybe_patch_concurrency
maybe_patch_concurrency()
import gevent
from kombu.utils.functional import retry_over_time
from tasks.runtime.gevent_compat import cooperative_retry_waits
print(cooperative_retry_waits() if fixed else None)
ticks = []
def beat():
    while True:
        ticks.append(1)
        gevent.sleep(0.05)
gevent.spawn(beat)
tries = []
def connect():
    tries.append(1)
    if len(tries) < 2:
        raise ConnectionError("refused")
retry_over_time(connect, ConnectionError, interval_start=0.5, max_retries=3)
print(len(ticks))
"""


def test_kombu_s_retry_wait_lets_the_other_greenlets_run_under_the_gevent_pool():
    """A consumer reconnecting to its lost broker waits in kombu's `retry_over_time`, with a `sleep` imported before
    the pool patched `time`: the whole process stood still, and the poller renewed no lease (the chaos run saw one
    lapse under a running write tool). Made cooperative, a beating greenlet goes on through the 0.5 s wait."""
    pytest.importorskip("gevent")
    out = subprocess.run([sys.executable, "-c", _RETRY_UNDER_THE_POOL, "fixed"], capture_output=True, text=True,
                         timeout=60, cwd=REPO, check=True).stdout.split()
    assert out[0] == "True"  # kombu's sleep was the unpatched one, and is gevent's now
    assert int(out[1]) >= 5  # ~10 beats of 50 ms in the wait; 0 while it blocked
