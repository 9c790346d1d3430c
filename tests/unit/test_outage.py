"""An outage is told once when it starts and once when it ends (the place is named by tasks/reach.py)."""

from __future__ import annotations

import redis

from tasks.runtime.outage import Outage


def test_an_outage_is_told_once_when_it_starts_and_once_when_it_ends():
    store = Outage("the store redis://127.0.0.1:7000/0", 2)
    assert store.reached(0.0) is None  # nothing to say while all is well
    err = redis.ConnectionError("Error 111 connecting to 127.0.0.1:7000. Connection refused.")
    first = store.failed(err, 10.0)
    assert first == ("cannot reach the store redis://127.0.0.1:7000/0 (Error 111 connecting to 127.0.0.1:7000. "
                     "Connection refused.); retrying every 2 s, and going on once it is back")
    assert store.failed(err, 12.0) is None and store.failed(err, 14.0) is None
    assert store.reached(25.0) == "reached the store redis://127.0.0.1:7000/0 again after 15 s; going on"
    assert store.reached(27.0) is None
    assert store.failed(redis.TimeoutError(), 30.0) == (
        "cannot reach the store redis://127.0.0.1:7000/0 (TimeoutError); retrying every 2 s, and going on once it "
        "is back"
    )

