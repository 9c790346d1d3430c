"""What Celery's gevent pool needs of the worker: trio kept out, and no blocking call in the event loop's callbacks.

httpcore2 (under the anthropic SDK) imports trio whenever it is installed (selenium, for one, brings it), and
trio's import builds an epoll object. Celery's gevent pool has monkey-patched `select` before anything else is
imported, and the patched module has no `epoll`: trio's import raises AttributeError, which httpcore2 does not
catch (it catches ImportError), so every provider call failed with "module 'select' has no attribute 'epoll'".
Baton is synchronous and never uses trio. Marked absent in `sys.modules`, its import raises ImportError, which
httpcore2 takes for "not installed".

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


def call_off_the_hub(fn: Callable[..., Any], *args: Any) -> None:
    """Call `fn(*args)` now, or, when called from gevent's hub (a signal handler under the gevent pool), in a
    greenlet of its own that the hub runs next."""
    gevent = sys.modules.get("gevent")
    if gevent is not None and gevent.getcurrent() is gevent.get_hub():
        gevent.spawn(fn, *args)
    else:
        fn(*args)
