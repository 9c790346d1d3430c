"""Fixtures for the browser tests: one real stack per module (redis-server, the fake Messages API that can
hold a stream mid-answer, a celery worker, `baton serve`) and Debian's Chromium driven by Playwright.

The stack is shared by the module's tests (a worker start plus its warm shutdown costs seconds); tests stay
independent because each uses its own chat, and the fake routes each request by the chat's first message to
that test's own script (as tests/integration/test_stream_replay.py does).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Stack
from tests.support.fake_anthropic import Fault, Reply, Script, failing
from tests.support.fake_anthropic_sse import first_user_text
from tests.support.held_stream import HoldingMessagesServer
from tests.support.processes import REPO, RedisServer
from tests.support.web_server import ApiServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Screenshots land here (gitignored) as well as in the test's tmp dir; override with BATON_TEST_ARTIFACTS.
ARTIFACTS = Path(os.environ.get("BATON_TEST_ARTIFACTS", REPO / "tests" / "artifacts"))


class Router:
    """The fake API's handler: each request goes to the script registered for its first user text."""

    def __init__(self) -> None:
        self.routes: dict[str, Script] = {}

    def add(self, first_message: str, replies: Iterable[Reply]) -> None:
        self.routes[first_message] = Script(replies)

    def __call__(self, body: dict[str, Any], index: int) -> Reply:
        script = self.routes.get(first_user_text(body))
        if script is None:
            return failing(Fault("http", status=500, message=f"no script for {first_user_text(body)!r}"))
        return script(body, index)


class Served:
    """The module's stack, as the browser tests use it."""

    def __init__(self, stack: Stack, router: Router, api: ApiServer) -> None:
        self.stack = stack
        self.router = router
        self.api = api
        self.client = stack.client()

    @property
    def url(self) -> str:
        return self.api.url


WORKER_ENV = {
    # Holds are ended by the tests, never by the idle timeout.
    "BATON_STREAM_IDLE_TIMEOUT": "60",
    "BATON_RETRY_BUDGET": "4",
}


@contextlib.contextmanager
def running_stack(tmp: Path, *, command: list[str] | None = None, **api_env: str) -> Iterator[Served]:
    """redis-server, the holding fake API, one worker (`w1`) and `baton serve` (with `api_env` besides the
    stack's env; `command` serves another ASGI app instead, see ApiServer); all stopped on exit."""
    router = Router()
    redis_server = RedisServer(tmp / "redis").start()
    fake_api = HoldingMessagesServer(router).start()
    stack = Stack(redis_server, fake_api, tmp)
    api = None
    try:
        stack.worker("w1", **WORKER_ENV)
        api = ApiServer({**stack.env, **api_env}, tmp, command=command).start()
        s = Served(stack, router, api)
        yield s
        s.client.close()
    finally:
        if api is not None:
            api.stop()
        fake_api.stop()
        stack.stop()
        redis_server.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One stack for a module's tests (each test uses its own chat)."""
    with running_stack(tmp_path_factory.mktemp("page")) as s:
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    with sync_playwright() as p:
        # Playwright starts Chromium in its own process group: close it ourselves, whatever happens.
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 860})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda err: errors.append(str(err)))
    try:
        yield pg
    finally:
        context.close()
    assert not errors, f"the page raised: {errors}"


@pytest.fixture
def shoot(tmp_path: Path):
    """`shoot(page, name)`: a full-page screenshot in the test's tmp dir, copied to ARTIFACTS."""

    def take(pg: Any, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        pg.screenshot(path=str(path), full_page=True)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, ARTIFACTS / path.name)
        return ARTIFACTS / path.name

    return take
