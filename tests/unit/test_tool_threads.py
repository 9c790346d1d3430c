"""The threads tool calls run on: reused when idle, never shared with a call that hangs."""

from __future__ import annotations

import threading

from agent.tools.threads import ToolThreads


def _run_and_wait(threads: ToolThreads) -> int:
    ran_on: list[int] = []
    done = threading.Event()

    def job() -> None:
        ran_on.append(threading.get_ident())
        done.set()

    threads.run(job)
    assert done.wait(5)
    return ran_on[0]


def _parked(threads: ToolThreads, count: int) -> bool:
    """Whether `count` threads are idle (a thread parks just after its job returns, so wait for it)."""
    for _ in range(500):
        with threads._lock:
            if len(threads._idle) >= count:
                return True
        threading.Event().wait(0.01)
    return False


def test_calls_one_after_another_run_on_one_thread():
    threads = ToolThreads()
    idents = []
    for _ in range(5):
        idents.append(_run_and_wait(threads))
        assert _parked(threads, 1)
    assert len(set(idents)) == 1 and threads.started == 1


def test_a_hung_call_keeps_its_thread_and_the_next_call_gets_another():
    threads = ToolThreads()
    release, hung_started = threading.Event(), threading.Event()

    def hang() -> None:
        hung_started.set()
        release.wait(10)

    threads.run(hang)
    assert hung_started.wait(5)
    _run_and_wait(threads)
    assert threads.started == 2
    release.set()
    assert _parked(threads, 2)


def test_a_job_that_raises_leaves_its_thread_serving():
    threads = ToolThreads()

    def boom() -> None:
        raise SystemExit(3)

    threads.run(boom)
    assert _parked(threads, 1)
    _run_and_wait(threads)
    assert threads.started == 1


def test_idle_threads_beyond_the_kept_number_end():
    threads = ToolThreads(idle_kept=1)
    release = threading.Event()
    idents: list[int] = []
    started = [threading.Event() for _ in range(3)]
    for ev in started:
        threads.run(lambda ev=ev: (idents.append(threading.get_ident()), ev.set(), release.wait(10)))
    assert all(ev.wait(5) for ev in started)
    serving = [t for t in threading.enumerate() if t.ident in idents]
    assert len(serving) == 3
    release.set()
    assert _parked(threads, 1)
    for t in serving:  # the parked one waits for work, the other two return
        t.join(0.5)
    assert sum(t.is_alive() for t in serving) == 1
    with threads._lock:
        assert len(threads._idle) == 1
