"""Settings: the contract's defaults, and a bad value failing with a message that names its variable."""

from __future__ import annotations

import os

import pytest

from config import settings as settings_module
from config.settings import SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Each test sees only the BATON_* variables it sets itself."""
    for name in list(os.environ):
        if name.startswith("BATON_"):
            monkeypatch.delenv(name)


def test_defaults_match_the_contract():
    """With nothing set, every documented default holds."""
    s = load_settings()
    assert s.redis_url == "redis://localhost:6379/0"
    assert s.broker_url == "redis://localhost:6379/0" and s.broker == s.redis_url
    assert s.provider == "anthropic"
    assert s.model and s.model.startswith("claude")
    assert s.tools == ""
    assert s.stream_idle_timeout == 20
    assert s.retry_budget == 4
    assert s.round_ttl == 600
    assert s.round_max_bytes == 98304
    assert s.max_interruptions == 3
    assert s.max_rounds == 12
    assert (s.sandbox, s.sandbox_network, s.sandbox_uid) == ("bwrap", "off", None)
    assert (s.prompt_cache, s.context_tokens) == ("on", None)  # None: the model's window (agent/history/context.py)


def test_broker_follows_the_redis_url_unless_overridden(monkeypatch):
    """The broker defaults to the store's URL, and an explicit BATON_BROKER_URL wins."""
    monkeypatch.setenv("BATON_REDIS_URL", "redis://store:6380/2")
    assert load_settings().broker_url == "redis://store:6380/2"
    monkeypatch.setenv("BATON_BROKER_URL", "redis://broker:6379/5")
    s = load_settings()
    assert (s.redis_url, s.broker_url, s.broker) == ("redis://store:6380/2", "redis://broker:6379/5", s.broker_url)


def test_environment_values_are_read(monkeypatch):
    """Each contract variable is read from the environment with its type."""
    values = {
        "BATON_PROVIDER": "scripted",
        "BATON_MODEL": "claude-test",
        "BATON_TOOLS": "pkg.mod:TOOLS",
        "BATON_STREAM_IDLE_TIMEOUT": "2.5",
        "BATON_RETRY_BUDGET": "1",
        "BATON_ROUND_TTL": "30",
        "BATON_ROUND_MAX_BYTES": "2048",
        "BATON_MAX_INTERRUPTIONS": "0",
        "BATON_MAX_ROUNDS": "2",
        "BATON_PROMPT_CACHE": "off",
        "BATON_CONTEXT_TOKENS": "50000",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    s = load_settings()
    assert (s.provider, s.model, s.tools) == ("scripted", "claude-test", "pkg.mod:TOOLS")
    assert (s.stream_idle_timeout, s.retry_budget, s.round_ttl) == (2.5, 1, 30)
    assert (s.round_max_bytes, s.max_interruptions, s.max_rounds) == (2048, 0, 2)
    assert (s.prompt_cache, s.context_tokens) == ("off", 50000)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("BATON_RETRY_BUDGET", "0"),
        ("BATON_PROVIDER", "gemini"),
        ("BATON_STREAM_IDLE_TIMEOUT", "abc"),
        ("BATON_STREAM_IDLE_TIMEOUT", "0"),
        ("BATON_MAX_ROUNDS", "-1"),
        ("BATON_ROUND_TTL", "ten minutes"),
        ("BATON_REDIS_URL", "localhost:6379"),
        ("BATON_BROKER_URL", "http://broker"),
        ("BATON_SANDBOX", "docker"),
        ("BATON_SANDBOX", "off"),
        ("BATON_SANDBOX_NETWORK", "yes"),
        ("BATON_SANDBOX_UID", "0"),
        ("BATON_SANDBOX_UID", "nobody"),
        ("BATON_PROMPT_CACHE", "yes"),
        ("BATON_CONTEXT_TOKENS", "10"),
        ("BATON_CONTEXT_TOKENS", "lots"),
    ],
)
def test_bad_value_names_its_variable(monkeypatch, variable, value):
    """A malformed value fails at load with SettingsError naming the variable and showing the value."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert variable in message
    assert repr(value) in message


def test_openai_is_a_provider(monkeypatch):
    """BATON_PROVIDER=openai is accepted; BATON_MODEL keeps its default (the deployment names its model)."""
    monkeypatch.setenv("BATON_PROVIDER", "openai")
    assert load_settings().provider == "openai"


def test_sandbox_settings_are_read(monkeypatch):
    """BATON_SANDBOX=none and BATON_SANDBOX_NETWORK=on are accepted as written; BATON_SANDBOX_UID is a uid."""
    monkeypatch.setenv("BATON_SANDBOX", "none")
    monkeypatch.setenv("BATON_SANDBOX_NETWORK", "on")
    monkeypatch.setenv("BATON_SANDBOX_UID", "65534")
    s = load_settings()
    assert (s.sandbox, s.sandbox_network, s.sandbox_uid) == ("none", "on", 65534)


def test_every_bad_variable_is_named(monkeypatch):
    """Several bad values are reported together, each by its own name."""
    monkeypatch.setenv("BATON_RETRY_BUDGET", "0")
    monkeypatch.setenv("BATON_PROVIDER", "gemini")
    with pytest.raises(SettingsError, match="BATON_RETRY_BUDGET") as info:
        load_settings()
    assert "BATON_PROVIDER" in str(info.value)


def test_current_reads_once(monkeypatch):
    """`current()` is the process-wide settings: read once, not re-read on every call."""
    settings_module.current.cache_clear()
    try:
        first = settings_module.current()
        monkeypatch.setenv("BATON_MAX_ROUNDS", "3")
        assert settings_module.current() is first
    finally:
        settings_module.current.cache_clear()


def test_the_api_token_setting_is_a_secret(monkeypatch):
    """BATON_API_TOKEN is read from the environment, kept out of reprs, and an empty value means unset."""
    monkeypatch.setenv("BATON_API_TOKEN", "tok-abcdef")
    settings = load_settings()
    assert settings.api_token is not None and settings.api_token.get_secret_value() == "tok-abcdef"
    assert "tok-abcdef" not in repr(settings) and "tok-abcdef" not in str(settings.model_dump())
    monkeypatch.setenv("BATON_API_TOKEN", "")
    assert load_settings().api_token is None
    monkeypatch.delenv("BATON_API_TOKEN")
    assert load_settings().api_token is None and load_settings().api_ping_interval == 15


def test_sentinels_and_master_give_sentinel_urls_for_celery_keeping_password_and_db(monkeypatch):
    """BATON_REDIS_SENTINELS + BATON_REDIS_MASTER: Celery's broker and result backend go through the Sentinels,
    with the password and database number of BATON_REDIS_URL (its host and port are ignored)."""
    from config.celeryconfig import celery_config

    monkeypatch.setenv("BATON_REDIS_URL", "redis://:s3cret@ignored:1/4")
    monkeypatch.setenv("BATON_REDIS_SENTINELS", "10.0.0.1:26379, 10.0.0.2:26380")
    monkeypatch.setenv("BATON_REDIS_MASTER", "baton")
    s = load_settings()
    assert s.sentinels == [("10.0.0.1", 26379), ("10.0.0.2", 26380)]
    expected = "sentinel://:s3cret@10.0.0.1:26379/4;sentinel://:s3cret@10.0.0.2:26380/4"
    assert s.broker == expected and s.result_backend == expected
    conf = celery_config(s)
    assert conf["broker_transport_options"]["master_name"] == "baton"
    assert conf["result_backend_transport_options"]["master_name"] == "baton"
    monkeypatch.setenv("BATON_BROKER_URL", "amqp://guest:guest@rabbit:5672//")
    s = load_settings()
    assert s.broker == "amqp://guest:guest@rabbit:5672//" and s.result_backend == expected


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"BATON_REDIS_SENTINELS": "h:26379"}, "BATON_REDIS_MASTER"),
        ({"BATON_REDIS_MASTER": "baton"}, "BATON_REDIS_SENTINELS"),
        ({"BATON_REDIS_SENTINELS": "no-port", "BATON_REDIS_MASTER": "baton"}, "BATON_REDIS_SENTINELS"),
    ],
)
def test_half_a_sentinel_setting_fails_naming_the_variables(monkeypatch, env, named):
    """A Sentinel list without a master name (or the reverse, or an address without a port) fails at start."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=named):
        load_settings()


def test_min_replicas_defaults_to_one_and_a_bad_value_fails_naming_the_variable(monkeypatch):
    """BATON_REDIS_MIN_REPLICAS: how many replicas a write-ahead entry waits for at most (default 1, 0 allowed)."""
    assert load_settings().redis_min_replicas == 1
    monkeypatch.setenv("BATON_REDIS_MIN_REPLICAS", "0")
    assert load_settings().redis_min_replicas == 0
    for bad in ("-1", "two", "101"):
        monkeypatch.setenv("BATON_REDIS_MIN_REPLICAS", bad)
        with pytest.raises(SettingsError, match="BATON_REDIS_MIN_REPLICAS"):
            load_settings()


def test_a_rabbitmq_broker_gets_a_quorum_queue_with_dead_letters_and_no_visibility_timeout(monkeypatch):
    """amqp:// brokers: a quorum work queue on a topic exchange dead-lettering to Baton's DLQ, publisher confirms,
    channel-error retry, per-consumer prefetch 1; the Redis transport's visibility timeout is not set."""
    from config.celeryconfig import celery_config

    monkeypatch.setenv("BATON_BROKER_URL", "amqp://guest:guest@rabbit:5672//")
    monkeypatch.setenv("BATON_QUEUE", "work")
    conf = celery_config(load_settings())
    (queue,) = conf["task_queues"]
    assert (queue.name, queue.exchange.type, queue.routing_key) == ("work", "topic", "work")
    assert queue.queue_arguments["x-queue-type"] == "quorum"
    assert queue.queue_arguments["x-dead-letter-exchange"] == "baton.deadletter"
    assert conf["broker_transport_options"] == {"confirm_publish": True}
    assert conf["broker_channel_error_retry"] is True and conf["worker_prefetch_multiplier"] == 1
    assert conf["worker_detect_quorum_queues"] is True


def test_sub_second_countdowns_wait_a_whole_second_on_rabbitmq_only():
    """RabbitMQ's native delayed delivery refuses a positive countdown below 1 s (kombu raises, and the message
    was lost): such a countdown becomes 1 s there; zero stays immediate; Redis keeps the exact value."""
    from config.topology import broker_countdown

    amqp, plain = "amqp://guest:guest@rabbit:5672//", "redis://localhost:6379/0"
    assert [broker_countdown(amqp, s) for s in (0, 0.2, 0.99, 1, 2.5)] == [0, 1.0, 1.0, 1, 2.5]
    assert [broker_countdown(plain, s) for s in (0, 0.2, 2.5)] == [0, 0.2, 2.5]


NODES = "10.0.0.1:6379, 127.0.0.1:7001,[::1]:7002"
REFUSED = "BATON_REDIS_CLUSTER needs BATON_BROKER_URL: a RabbitMQ, or a Redis that is not the cluster"


@pytest.mark.parametrize("broker", [
    "redis://10.0.0.1:6379/0", "redis://10.0.0.1/0", "rediss://:pw@10.0.0.1:6379/1",  # 6379: redis-py's default
    "redis://127.0.0.1:7001/0", "redis://localhost:7001/0", "redis://LOCALHOST.:7001", "redis://127.0.0.2:7001",
    "redis://[::1]:7001/0", "redis://[::ffff:127.0.0.1]:7001", "redis://0.0.0.0:7001", "redis://:7001/0",
    "redis://localhost:7002/0", "redis://127.0.0.1:7002/0",
])
def test_a_broker_at_one_of_the_clusters_startup_nodes_is_one_of_its_nodes(broker):
    """The same address however it is spelled: every loopback name or address is this machine."""
    from config.settings import broker_is_a_cluster_node

    assert broker_is_a_cluster_node(broker, NODES)


@pytest.mark.parametrize("broker", [
    "redis://10.0.0.1:6380/0", "redis://10.0.0.2:6379/0", "redis://localhost:6379/0", "redis://127.0.0.1:7003/0",
    "amqp://guest:guest@10.0.0.1:6379//", "unix:///run/redis.sock", "redis://broker-redis:7001/0",
])
def test_a_broker_at_another_address_is_not(broker):
    from config.settings import broker_is_a_cluster_node

    assert not broker_is_a_cluster_node(broker, NODES)


def test_on_a_cluster_the_broker_may_be_the_redis_url_unless_that_is_a_node(monkeypatch):
    """BATON_REDIS_URL's host and port are ignored on a cluster (it gives the password and TLS), so a broker equal
    to it is a plain Redis beside the cluster and fine (it was refused); a broker at a startup node is refused, as is
    none at all, with the same words; the broker is then Celery's result backend too."""
    monkeypatch.setenv("BATON_REDIS_CLUSTER", "127.0.0.1:7000,127.0.0.1:7001")
    with pytest.raises(SettingsError, match=REFUSED):
        load_settings()
    monkeypatch.setenv("BATON_REDIS_URL", "redis://:pw@127.0.0.1:6400/0")
    monkeypatch.setenv("BATON_BROKER_URL", "redis://:pw@127.0.0.1:6400/0")
    s = load_settings()
    assert (s.broker, s.result_backend) == (s.redis_url, s.redis_url)
    assert s.cluster == [("127.0.0.1", 7000), ("127.0.0.1", 7001)]
    for at_a_node in ("redis://:pw@localhost:7001/0", "redis://127.0.0.1:7000"):
        monkeypatch.setenv("BATON_BROKER_URL", at_a_node)  # another URL than BATON_REDIS_URL: was accepted
        with pytest.raises(SettingsError, match=REFUSED):
            load_settings()
        monkeypatch.setenv("BATON_REDIS_URL", at_a_node)
        with pytest.raises(SettingsError, match=REFUSED):
            load_settings()
        monkeypatch.setenv("BATON_REDIS_URL", "redis://:pw@127.0.0.1:6400/0")
