"""`PerProcess`: one per process and key, a forked child builds its own, and a lock held at the fork is not."""

from __future__ import annotations

import os
import signal
import threading

from agent.per_process import PerProcess


def test_one_per_key_made_once():
    made: list[str] = []
    things: PerProcess[object] = PerProcess()

    def make(name: str):
        made.append(name)
        return object()

    a = things.get("a", lambda: make("a"))
    assert things.get("a", lambda: make("a-again")) is a
    assert things.get("b", lambda: make("b")) is not a
    assert made == ["a", "b"]


def _in_child(body) -> int:
    """Run `body` in a forked child (SIGALRM ends a hung one); its exit code."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's side
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # pytest-timeout's handler would raise instead
        signal.alarm(5)
        try:
            os._exit(body())
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_forked_child_builds_its_own_even_while_a_parent_thread_holds_the_lock():
    """A prefork child is forked while the worker's threads run; one of them inside `get` at that instant left the
    old registries' lock held for ever in the child (its holder was not forked), and the child's first turn hung."""
    things: PerProcess[object] = PerProcess()
    parents = things.get("k", object)
    inside, release = threading.Event(), threading.Event()

    def slow_make():
        inside.set()
        release.wait(10)
        return object()

    holder = threading.Thread(target=things.get, args=("other", slow_make))
    holder.start()
    assert inside.wait(5)  # the holder is in `get`, under the lock
    try:
        code = _in_child(lambda: 0 if things.get("k", object) is not parents else 1)
    finally:
        release.set()
        holder.join(5)
    assert code == 0  # not -14 (SIGALRM: hung on the lock) and not 1 (the parent's instance)
