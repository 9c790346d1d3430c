"""What Celery's gevent pool needs of the worker: trio kept out, kombu's retry waits cooperative, and no blocking
call in the event loop's callbacks.

httpcore2 (under the anthropic SDK) imports trio whenever it is installed (selenium, for one, brings it), and
trio's import builds an epoll object. Celery's gevent pool has monkey-patched `select` before anything else is
imported, and the patched module has no `epoll`: trio's import raises AttributeError, which httpcore2 does not
catch (it catches ImportError), so every provider call failed with "module 'select' has no attribute 'epoll'".
Baton is synchronous and never uses trio. Marked absent in `sys.modules`, its import raises ImportError, which
httpcore2 takes for "not installed".

kombu's retry loop (`retry_over_time`: the consumer reconnecting to a broker it lost) waits with a `sleep` it
imported before the pool patched `time`: Celery imports kombu while choosing the pool. Each wait, 2 s, then 4, 6 …
up to 30, blocked the whole process: every unit stood still, and its poller renewed no lease. Measured in the chaos
run: beats 2 s and 4 s late in both workers as the broker restarted, a lease lapsed under a unit inside a write tool,
and another worker ran the next round beside it. The patched `sleep` lets the other greenlets run through the wait.

gevent runs signal handlers (and so Celery's `worker_shutting_down`) as callbacks of its hub, where a blocking
call such as a Redis write raises BlockingSwitchOutError: the drain flag was never set, so running units never
checkpointed and the warm shutdown waited for them to end.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def keep_trio_out_under_gevent() -> bool:
    """Mark trio absent if gevent has patched `select` and trio is not loaded yet; True when it did."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None or "trio" in sys.modules or not monkey.is_module_patched("select"):
        return False
    sys.modules["trio"] = None  # type: ignore[assignment]  # None: the import system's "not importable"
    return True


def cooperative_retry_waits() -> bool:
    """Point kombu's retry waits at gevent's `sleep` once gevent has patched `time`; True when it did."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None or not monkey.is_module_patched("time"):
        return False
    import time

    from kombu.utils import functional

    if functional.sleep is time.sleep:  # kombu was imported after the patch
        return False
    functional.sleep = time.sleep
    return True


def call_off_the_hub(fn: Callable[..., Any], *args: Any) -> None:
    """Call `fn(*args)` now, or, when called from gevent's hub (a signal handler under the gevent pool), in a
    greenlet of its own that the hub runs next."""
    gevent = sys.modules.get("gevent")
    if gevent is not None and gevent.getcurrent() is gevent.get_hub():
        gevent.spawn(fn, *args)
    else:
        fn(*args)
