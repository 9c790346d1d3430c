"""What an entry point says when the store or the broker is down: which one, where, never a password."""

from __future__ import annotations

import redis
from kombu.exceptions import OperationalError

from config.settings import Settings
from tasks.reach import Unavailable


def test_the_store_is_named_with_its_address_and_the_password_masked():
    settings = Settings(redis_url="redis://:hunter2@store.internal:6380/2")
    err = Unavailable("store", settings, redis.ConnectionError("Error 111 connecting to store.internal:6380."))
    assert str(err) == (
        "cannot reach the store (Redis) at redis://:**@store.internal:6380/2:"
        " Error 111 connecting to store.internal:6380"
    )
    assert err.label == "the store (Redis)" and "hunter2" not in str(err)


def test_behind_sentinels_the_store_is_named_by_its_master_and_sentinels():
    settings = Settings(redis_url="redis://:pw@x:1/0", redis_sentinels="s1:26379,s2:26379", redis_master="baton")
    err = Unavailable("store", settings, redis.ConnectionError("No master found for 'baton'"))
    assert "master 'baton' via the Sentinels at s1:26379,s2:26379" in str(err) and "pw" not in str(err)


def test_the_broker_is_named_by_its_kind_and_a_consequence_is_appended():
    settings = Settings(redis_url="redis://store:6379/0", broker_url="amqp://baton:s3cret@rabbit:5672//")
    err = Unavailable("broker", settings, OperationalError("[Errno 111] Connection refused"), consequence="then")
    assert str(err) == (
        "cannot reach the broker (RabbitMQ) at amqp://baton:**@rabbit:5672//: [Errno 111] Connection refused; then"
    )
    same = Unavailable("broker", Settings(redis_url="redis://store:6379/0"), OSError("refused"))
    assert str(same) == "cannot reach the broker (Redis) at redis://store:6379/0: refused"


def test_a_refusal_by_a_broker_that_is_up_says_it_refused_and_fails_the_unit_with_its_own_words():
    from amqp.exceptions import PreconditionFailed

    from tasks.client.publisher import BROKER_DOWN, BROKER_REFUSED, failure_of

    settings = Settings(redis_url="redis://store:6379/0", broker_url="amqp://baton:s3cret@rabbit:5672//")
    refusal = PreconditionFailed("PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'gpu'")
    err = Unavailable("broker", settings, refusal, consequence="then")
    assert str(err).startswith("the broker (RabbitMQ) at amqp://baton:**@rabbit:5672// refused it: ")
    assert "inequivalent arg 'type'" in str(err) and str(err).endswith("; then")
    assert failure_of(refusal) is BROKER_REFUSED and failure_of(OperationalError("refused")) is BROKER_DOWN
    assert BROKER_REFUSED.retryable and BROKER_REFUSED.failure_class == "infra_transient"
