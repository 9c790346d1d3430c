"""Fleet-wide rate limits through real workers: four `celery worker` processes share what the fake API's headers
and 429s say, and keep under an agent's `RateLimits`, through one Redis (CONTRACT.md, "Spend")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Stack
from tests.support.agents_rate_limited import LIMITED_RPM
from tests.support.fake_anthropic import FakeMessagesServer, Fault, Reply, failing, text
from tests.support.fake_rate_limit import FixedWindow, most_in_window
from tests.support.processes import RedisServer, wait_until

pytestmark = pytest.mark.integration

WORKERS = 4


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One Redis, one fake Messages API and four workers (two units each) for the module: what each test proves
    holds for any fleet, so they need not each start their own."""
    tmp: Path = tmp_path_factory.mktemp("rate-limits")
    redis_server = RedisServer(tmp / "redis").start()
    fake = FakeMessagesServer(keep_alive=True).start()
    stack = Stack(redis_server, fake, tmp)
    stack.env["BATON_AGENTS"] = "tests.support.agents_rate_limited:AGENTS"
    try:
        for i in range(WORKERS):
            stack.worker(f"rl{i}", concurrency=2)
        yield stack
    finally:
        stack.stop()
        fake.stop()
        redis_server.stop()


def _fake(stack: Stack) -> FakeMessagesServer:
    assert stack.fake_api is not None
    return stack.fake_api


def _send_all(stack: Stack, prefix: str, turns: int, agent: str | None = None, timeout: float = 150) -> list[Any]:
    client = stack.client()
    refs = [client.send_message(f"{prefix}-{i}", f"{prefix} turn {i}", agent=agent) for i in range(turns)]
    with ThreadPoolExecutor(16) as waiters:
        return list(waiters.map(lambda ref: client.wait(ref, timeout=timeout), refs))


@pytest.mark.timeout(180)
def test_a_limited_provider_refuses_the_fleet_a_handful_of_times(fleet: Stack) -> None:
    """A fake that takes 10 requests per 3 s window (429 with retry-after past them, its rate-limit headers on every
    answer): 40 turns on 4 workers all complete, and the fake refuses at most two requests (none in the runs of stop
    55; three in every run before it, all in the first window: its first answer said 9 were left while seven more
    sent with it were on their way). Each worker finding out on its own (no shared state), the fleet meets a 429 at
    nearly every window, several of them."""
    fake = _fake(fleet)
    fake.set_handler(lambda body, index: text("within the limit"))
    fake.limiter = FixedWindow(10, 3.0)
    fake.rate_refused.clear()
    try:
        results = _send_all(fleet, "shared", 40)
    finally:
        fake.limiter = None
    failed = [(r.status, r.failure) for r in results if r.status != "completed"]
    assert failed == [], f"{len(failed)} of 40 turns did not complete, e.g. {failed[:3]}"
    assert len(fake.rate_refused) <= 2, f"the fake refused {len(fake.rate_refused)} requests"


@pytest.mark.timeout(180)
def test_configured_limits_hold_in_every_window_of_a_minute(fleet: Stack) -> None:
    """30 turns of an agent limited to 20 requests a minute, on 4 workers at once: no 60 s window of the requests the
    fake received holds more than 21 (one over, as the contract allows), and every turn completes, the last ones
    after the first have left the window."""
    fake = _fake(fleet)
    fake.set_handler(lambda body, index: text("limited"))
    start = len(fake.delivered_at)
    results = _send_all(fleet, "configured", 30, agent="limited", timeout=150)
    assert [r.status for r in results].count("completed") == 30, [r.failure for r in results if r.failure][:3]
    times = fake.delivered_at[start:]
    assert len(times) == 30
    assert most_in_window(times, 60.0) <= LIMITED_RPM + 1, f"{most_in_window(times, 60.0)} requests in one minute"


@pytest.mark.timeout(120)
def test_a_long_wait_goes_back_to_the_queue_and_spends_no_attempt(fleet: Stack) -> None:
    """A 429 asking for 9 s on one chat: its turn (one attempt refused, replayed in its budget) and a turn of another
    chat sent meanwhile both wait longer than BATON_RATE_WAIT (5 s), so both go back to the queue (`waiting_reason:
    rate_limited`, a `turn.retry` saying so) instead of holding a worker, and complete after the 9 s. The waits are
    no attempts: one attempt for the second turn, two (one discarded) for the first."""
    fake = _fake(fleet)
    refused: list[float] = []
    answered: list[float] = []

    def handler(body: dict[str, Any], index: int) -> Reply:
        if "first" in str(body["messages"][0]["content"]) and not refused:
            refused.append(time.time())
            return failing(Fault("http", status=429, retry_after=9, message="rate limited"))
        answered.append(time.time())
        return text("after the wait")

    fake.set_handler(handler)
    client = fleet.client()
    first = client.send_message("wait-a", "first")

    def waiting(ref: Any) -> bool:
        return client.turn(ref.chat_id, ref.turn_id).waiting_reason == "rate_limited"

    wait_until(lambda: waiting(first), 15, what="the first turn waiting for the rate limit")  # its 429 shared by then
    second = client.send_message("wait-b", "second")
    wait_until(lambda: waiting(second), 15, what="the second turn waiting for the rate limit")
    for ref, attempts in ((first, (2, 1)), (second, (1, 0))):
        done = client.wait(ref, timeout=60)
        assert done.status == "completed" and done.reply == "after the wait"
        assert (done.usage.attempts, done.usage.discarded_attempts) == attempts
        waits = [e.model_extra or {} for e in client.events(ref.chat_id)
                 if e.type == "turn.retry" and (e.model_extra or {}).get("cause") == "rate_limited"]
        assert waits and waits[0]["discarded"] is False and waits[0]["retry_in"] > 5
    assert min(answered) >= refused[0] + 8.9  # nobody sent before the 9 s were over


@pytest.mark.timeout(120)
def test_a_coding_run_waits_in_the_queue_too(fleet: Stack, tmp_path: Path) -> None:
    """A coding run refused with a 429 asking 8 s: it goes back to the queue as a turn does (`waiting_reason:
    rate_limited`, a `run.step` with `status: rate_limited` saying so) and completes after, two attempts counted."""
    fake = _fake(fleet)
    refused: list[float] = []

    def handler(body: dict[str, Any], index: int) -> Reply:
        if not refused:
            refused.append(time.time())
            return failing(Fault("http", status=429, retry_after=8, message="rate limited"))
        return text("Nothing to change.")

    fake.set_handler(handler)
    client = fleet.client()
    (tmp_path / "ws").mkdir()
    ref = client.start_run("look and stop", workspace=tmp_path / "ws")
    wait_until(lambda: client.run_status(ref.run_id).waiting_reason == "rate_limited", 15,
               what="the run waiting for the rate limit")
    done = client.wait(ref, timeout=60)
    assert done.status == "completed" and (done.usage.attempts, done.usage.discarded_attempts) == (2, 1)
    steps = [e.model_extra or {} for e in client.events(ref.run_id) if e.type == "run.step"]
    waits = [s for s in steps if s.get("status") == "rate_limited"]
    assert waits and waits[0]["cause"] == "rate_limited" and waits[0]["retry_in"] > 5


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_each_sdk_hands_over_the_headers_of_answers_and_refusals(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real SDK over HTTP (no worker needed): every answer's headers reach the sink and read as the
    requests left with their reset, and the 429 past the limit as its retry-after."""
    from agent.loop.cancel import CancelToken
    from agent.provider.anthropic_provider import AnthropicProvider
    from agent.provider.base import AttemptFailed, Endpoint, ProviderRequest
    from agent.provider.openai_provider import OpenAIProvider
    from agent.provider.rate_headers import read_headers
    from tests.conftest import FAKE_KEY, FAKE_OPENAI_KEY, fake_server

    server = fake_server(provider)
    server.limiter = FixedWindow(2, 30.0)
    seen: list[tuple[str, dict[str, str]]] = []
    with server:
        monkeypatch.setenv("BATON_TEST_KEY", FAKE_OPENAI_KEY if provider == "openai" else FAKE_KEY)
        kind = OpenAIProvider if provider == "openai" else AnthropicProvider
        sdk = kind(idle_timeout=5, endpoint=Endpoint(server.url, "BATON_TEST_KEY"),
                   on_headers=lambda model, headers: seen.append((model, dict(headers))))
        request = ProviderRequest(model="m-1", messages=[{"role": "user", "content": "hi"}])
        for _ in range(2):
            sdk.stream(request, cancel=CancelToken())
        with pytest.raises(AttemptFailed):
            sdk.stream(request, cancel=CancelToken())
    now = time.time()
    said = [read_headers(headers, now=now) for _, headers in seen]
    assert [model for model, _ in seen] == ["m-1"] * 3
    assert [s.requests_left for s in said] == [1, 0, 0]
    assert said[1].exhausted is not None and 28 <= said[1].wait <= 31  # at 0: wait for the reset
    assert said[2].retry_after is not None and 28 <= said[2].retry_after <= 31
