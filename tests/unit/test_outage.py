"""An outage is told once when it starts and once when it ends, naming the place and never a password."""

from __future__ import annotations

import redis

from config.settings import Settings
from tasks.runtime.outage import Outage
from tasks.store.connect import describe_store, safe_url


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


def test_places_are_named_without_their_password():
    assert safe_url("redis://:hunter2@10.0.0.5:6379/0") == "redis://:**@10.0.0.5:6379/0"
    assert safe_url("amqp://baton:hunter2@mq:5672/prod") == "amqp://baton:**@mq:5672/prod"
    assert safe_url("redis://10.0.0.5:6379/0") == "redis://10.0.0.5:6379/0"
    plain = Settings(redis_url="redis://:hunter2@10.0.0.5:6379/0")
    assert describe_store(plain) == "redis://:**@10.0.0.5:6379/0"
    sentinel = Settings(redis_url="redis://:hunter2@ignored:6379/0", redis_sentinels="s1:26379,s2:26379",
                        redis_master="baton")
    assert describe_store(sentinel) == "(master 'baton' through the Sentinels s1:26379,s2:26379)"
