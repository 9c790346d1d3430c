"""Loaded (through PYTHONPATH) by the gevent worker bench/concurrency.py starts: import trio before gevent patches.

httpcore2 (under the anthropic SDK) imports trio when it is installed, and trio's import builds an epoll object;
Celery's gevent pool monkey-patches `select` first, which removes `select.epoll`, so the first turn failed with
"module 'select' has no attribute 'epoll'". Imported here, before the patch, trio loads (and is never used).
"""

import contextlib

with contextlib.suppress(ImportError):
    import trio  # noqa: F401
