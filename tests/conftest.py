"""Shared fixtures. Integration fixtures start real processes and always stop them."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import xdist_groups
from tests.support.fake_anthropic import FakeMessagesServer
from tests.support.fake_openai import FakeChatServer
from tests.support.processes import REPO, RedisServer, Worker
from tests.support.rabbitmq import RabbitMQNode, find_rabbitmq_server
from tests.support.web_server import ApiServer

FAKE_KEY = "sk-ant-test-SECRET-0123456789abcdef"
FAKE_OPENAI_KEY = "sk-proj-test-SECRET-fedcba9876543210"
# The providers a test proves the edge on: `@pytest.mark.parametrize("provider", PROVIDERS)` overrides the
# `provider` fixture (anthropic), and `fake_api` and `stack` follow it.
PROVIDERS = ["anthropic", "openai"]


@pytest.fixture
def provider() -> str:
    return "anthropic"


def fake_server(provider: str) -> FakeMessagesServer:
    """The fake of `provider`'s API (not started); both take the same handlers."""
    return FakeChatServer() if provider == "openai" else FakeMessagesServer()


def provider_env(provider: str, fake_api: FakeMessagesServer) -> dict[str, str]:
    """What a worker needs to reach `fake_api` as `provider`."""
    if provider == "openai":
        return {"BATON_PROVIDER": "openai", "OPENAI_BASE_URL": fake_api.url, "OPENAI_API_KEY": FAKE_OPENAI_KEY}
    return {"BATON_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": fake_api.url}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook turns the marks into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in an xdist group (its file's unless it names one); on an xdist worker, the groups in the order
    they should be handed out (tests/support/xdist_groups.py). A serial run (`-n 0`) keeps pytest's order."""
    groups = xdist_groups.in_groups(items)
    if hasattr(config, "workerinput"):  # an xdist worker: its collection order is the order groups go out in
        items[:] = xdist_groups.ordered(groups)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def redis_aof(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis-aof", aof=True).start()
    yield server
    server.stop()


@pytest.fixture
def fake_api(provider: str) -> Iterator[FakeMessagesServer]:
    server = fake_server(provider).start()
    yield server
    server.stop()


class Stack:
    """A test's own Redis, queue, fake provider and workers, with the env a worker and client share."""

    def __init__(self, redis_server: RedisServer, fake_api: FakeMessagesServer | None, tmp_path: Path) -> None:
        self.redis_server = redis_server
        self.fake_api = fake_api
        self.tmp_path = tmp_path
        self.queue = f"test-{uuid.uuid4().hex[:8]}"
        self.workers: list[Worker] = []
        self.env: dict[str, str] = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", str(tmp_path)),
            "PYTHONPATH": str(REPO),
            "BATON_REDIS_URL": redis_server.url,
            "BATON_QUEUE": self.queue,
            "BATON_PROVIDER": "anthropic" if fake_api is not None else "scripted",
            "BATON_TOOLS": "tests.support.counting_tools:TOOLS",
            "BATON_BACKOFF_SCALE": "0",
            "BATON_MODEL": "claude-test",
            "ANTHROPIC_API_KEY": FAKE_KEY,
        }
        self.provider = "anthropic"
        if fake_api is not None:
            self.provider = "openai" if isinstance(fake_api, FakeChatServer) else "anthropic"
            self.env.update(provider_env(self.provider, fake_api))

    def worker(self, name: str = "w1", *, concurrency: int = 2, pool: str | None = None, consume: str | None = None,
               **env: str) -> Worker:
        worker = Worker(name, {**self.env, **env}, self.tmp_path, concurrency=concurrency, pool=pool, consume=consume)
        self.workers.append(worker)
        return worker.start()

    def client(self, **env: str):
        from config.settings import Settings
        from tasks.client import Client

        overrides = {k[len("BATON_") :].lower(): v for k, v in {**self.env, **env}.items() if k.startswith("BATON_")}
        return Client(Settings(**overrides))

    def settings(self, **env: str):
        from config.settings import Settings

        overrides = {k[len("BATON_") :].lower(): v for k, v in {**self.env, **env}.items() if k.startswith("BATON_")}
        return Settings(**overrides)

    def async_client(self, **env: str):
        from tasks.client import AsyncClient

        return AsyncClient(self.settings(**env))

    def stop(self) -> None:
        for worker in self.workers:
            worker.discard()


@pytest.fixture
def stack(redis_server: RedisServer, fake_api: FakeMessagesServer, tmp_path: Path) -> Iterator[Stack]:
    s = Stack(redis_server, fake_api, tmp_path)
    yield s
    s.stop()


@pytest.fixture
def scripted_stack(redis_server: RedisServer, tmp_path: Path) -> Iterator[Stack]:
    s = Stack(redis_server, None, tmp_path)
    yield s
    s.stop()


@pytest.fixture
def serve(stack: Stack) -> Iterator:
    """Start `python -m tasks.cli serve` on a free port against the stack's Redis: `serve(**env)` -> ApiServer
    (extra env such as BATON_API_TOKEN); every server started is stopped at teardown."""
    servers: list[ApiServer] = []

    def start(**env: str) -> ApiServer:
        server = ApiServer({**stack.env, **env}, stack.tmp_path).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _rabbitmq_or_skip(tmp_path: Path, **options: int) -> RabbitMQNode:
    if find_rabbitmq_server() is None:
        pytest.skip("rabbitmq-server is not installed (Debian: apt-get install rabbitmq-server; .ci/run does)")
    return RabbitMQNode(tmp_path, **options).start()


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQNode]:
    """A private RabbitMQ node shared by a module's tests (each test has its own queue); default timeouts."""
    node = _rabbitmq_or_skip(tmp_path_factory.mktemp("rabbitmq"))
    yield node
    node.stop()


@pytest.fixture
def amqp_stack(rabbitmq: RabbitMQNode, redis_server: RedisServer, fake_api: FakeMessagesServer,
               tmp_path: Path) -> Iterator[Stack]:
    """As `stack`, with the private RabbitMQ node as broker (Redis stays the store and result backend)."""
    s = Stack(redis_server, fake_api, tmp_path)
    s.env["BATON_BROKER_URL"] = rabbitmq.url
    yield s
    s.stop()
