"""Prices and budgets through real workers: cost at the agent's price, a user's budget stopping the turn that would
cross it (and resumed by `retry` once raised), 20 turns at once on 3 workers never past a limit, and a drained run
and a SIGKILLed worker charged exactly what the fake answered (plus the lost attempt's worst case)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from agent.provider.base import TokenUsage
from agent.provider.price import cost_usd
from tasks.store import budgets
from tests.conftest import Stack
from tests.support import counting_tools
from tests.support.agents_priced import PRICE
from tests.support.fake_anthropic import (
    ByConversation,
    FakeMessagesServer,
    Fault,
    Reply,
    Script,
    failing,
    text,
    tool_call,
)
from tests.support.processes import REPO, RedisServer, wait_until

pytestmark = pytest.mark.integration

AGENTS = {"BATON_AGENTS": "tests.support.agents_priced:AGENTS"}
WAIT = 60
# The crowd's budget: two worst cases (each near 780 tokens: 200 of output, the request's ~145 estimated tokens
# times four) fit in it, three do not; each turn costs 700, under its worst case, as every real attempt does.
LIMIT = 2000
COST = 700


def billed(reply: Reply, *, cut: bool = False) -> TokenUsage:
    """What the fake reports for `reply`: all of it, or (cut after `message_start`) its input and one output token."""
    return TokenUsage(
        input_tokens=reply.input_tokens,
        output_tokens=1 if cut else reply.output_tokens,
        cache_read_input_tokens=reply.cached_tokens,
    )


def tokens(usage: TokenUsage) -> int:
    return usage.prompt_tokens + usage.output_tokens


class Shared:
    """The module's stack: one Redis, one fake Messages API routed by conversation, three workers."""

    def __init__(self, stack: Stack, router: ByConversation) -> None:
        self.stack, self.router = stack, router
        self.client = stack.client()
        self.redis = redis.Redis.from_url(stack.redis_server.url)

    def route(self, key: str, replies: list[Reply]) -> None:
        self.router.scripts[key] = Script(replies)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    tmp = tmp_path_factory.mktemp("budgets")
    redis_server = RedisServer(tmp / "redis").start()
    fake_api = FakeMessagesServer().start()
    router = ByConversation({})
    fake_api.set_handler(router)
    stack = Stack(redis_server, fake_api, tmp)
    for name in ("w1", "w2", "w3"):
        stack.worker(name, **AGENTS)
    s = Shared(stack, router)
    yield s
    s.client.close()
    stack.stop()
    fake_api.stop()
    redis_server.stop()


def test_cost_is_the_fakes_tokens_at_the_agents_price(shared: Shared):
    """A tool round, a discarded attempt (dropped after `message_start`) and the answer: `usage.cost_usd` is every
    token the fake reported at the agent's price, in the result, the ending event and the budget's spent; an agent
    without a price shows no cost."""
    first = Reply(tool_call("lookup", {"key": "k"}).content, input_tokens=1200, output_tokens=40, cached_tokens=300)
    draft = Reply([{"type": "text", "text": "a draft that drops"}], input_tokens=1500)
    answer = Reply([{"type": "text", "text": "k is known"}], input_tokens=1500, output_tokens=25, cached_tokens=900)
    shared.route("cost-chat", [first, failing(Fault("drop", after_events=2), like=draft), answer])
    shared.client.set_budget("chat:cost-chat", usd=10.0)
    result = shared.client.wait(shared.client.send_message("cost-chat", "cost-chat: what is k?", agent="priced"), WAIT)
    assert result.status == "completed" and result.usage.discarded_attempts == 1, result
    expected = cost_usd(billed(first) + billed(draft, cut=True) + billed(answer), PRICE)
    assert result.usage.cost_usd == pytest.approx(expected, abs=1e-9)
    ended = [e for e in shared.client.events("cost-chat") if e.type == "turn.completed"][-1]
    assert ended.model_extra["usage"]["cost_usd"] == pytest.approx(expected, abs=1e-9)
    assert shared.client.budget("chat:cost-chat")["spent_usd"] == pytest.approx(expected, abs=1e-9)

    shared.route("plain-chat", [text("no price")])
    plain = shared.client.wait(shared.client.send_message("plain-chat", "plain-chat: hi", agent="plain"), WAIT)
    assert plain.status == "completed" and "cost_usd" not in plain.usage.model_dump()


def test_a_users_budget_stops_the_turn_that_would_cross_it_then_retry_resumes_it(shared: Shared):
    """alice's budget holds 4000 tokens: her first turn (110) passes; her second's tool round (3510) passes, and its
    next step, whose worst case would cross, is not sent: the turn fails `budget_exceeded` naming user:alice. bob's
    turn is not held by it. Raised, `retry` resumes the turn from its stored round: the tool is not run again."""
    c = shared.client
    c.set_budget("user:alice", tokens=4000, period="day")
    shared.route("alice-1", [Reply(text("one").content, input_tokens=100, output_tokens=10)])
    assert c.wait(c.send_message("alice-1", "alice-1: first", agent="priced", user="alice"), WAIT).status == "completed"
    step = Reply(tool_call("record_note", {"note": "alice"}).content, input_tokens=3500, output_tokens=10)
    shared.route("alice-2", [step, Reply(text("done").content, input_tokens=100, output_tokens=10)])
    refused = c.wait(c.send_message("alice-2", "alice-2: second", agent="priced", user="alice"), WAIT)
    assert refused.status == "failed" and refused.failure["class"] == "budget_exceeded", refused
    assert "user:alice" in refused.failure["message"] and refused.failure["retryable"] is False
    assert shared.router.scripts["alice-2"].calls == 1  # the step over the budget was never sent
    held = c.budget("user:alice")
    assert (held["spent_tokens"], held["reserved_tokens"]) == (110 + 3510, 0)
    ended = [e for e in c.events("alice-2") if e.type == "turn.failed"][-1]
    assert ended.model_extra["resumable_round"] is True

    shared.route("bob-1", [Reply(text("bob's").content, input_tokens=100, output_tokens=10)])
    assert c.wait(c.send_message("bob-1", "bob-1: hello", agent="priced", user="bob"), WAIT).status == "completed"

    c.set_budget("user:alice", tokens=100_000, period="day")
    resumed = c.wait(c.retry("alice-2"), WAIT)
    assert resumed.status == "completed" and resumed.reply == "done" and resumed.resumed, resumed
    assert counting_tools.calls(shared.redis, "record_note") == 1
    assert c.budget("user:alice")["spent_tokens"] == 110 + 3510 + 110


def test_twenty_turns_at_once_on_three_workers_never_take_spent_past_the_limit(shared: Shared):
    """20 users' turns of one agent at once, held by one 2000-token budget: spent plus reserved stays within the
    limit at every look, some turns are refused, and what is spent is exactly what the completed turns cost."""
    c = shared.client
    c.set_budget("agent:plain", tokens=LIMIT, period="total")
    slow = Reply(text("counted").content, input_tokens=COST - 200, output_tokens=200, pace=0.05)
    chats = [f"crowd-{i}" for i in range(20)]
    for chat in chats:
        shared.route(chat, [slow])
    looks: list[dict[str, Any]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            looks.append(c.budget("agent:plain"))
            time.sleep(0.01)  # sampling the budget while the turns run, not waiting for them

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        refs = [c.send_message(chat, f"{chat}: count me", agent="plain", user=chat) for chat in chats]
        results = [c.wait(ref, WAIT) for ref in refs]
    finally:
        done.set()
        watcher.join()
    completed = [r for r in results if r.status == "completed"]
    refused = [r for r in results if r.status == "failed"]
    assert all(r.failure["class"] == "budget_exceeded" and "agent:plain" in r.failure["message"] for r in refused)
    assert completed and refused, [r.status for r in results]
    assert max(look["spent_tokens"] + look["reserved_tokens"] for look in looks) <= LIMIT
    final = c.budget("agent:plain")
    assert final["spent_tokens"] == COST * len(completed) <= LIMIT and final["reserved_tokens"] == 0


def test_the_cli_and_the_async_client_set_show_and_clear_a_budget(shared: Shared):
    """`baton budget set/show/clear` print the contract's answer (exit 2 for a bad scope or an unknown budget); the
    asyncio client reads and writes the same budgets."""
    env = {**shared.stack.env}

    def baton(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tasks.cli", "budget", *args, "--json"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=30)

    made = baton("set", "user:carol", "--usd", "2.5", "--tokens", "9000", "--period", "day")
    assert made.returncode == 0, made.stderr
    shown = json.loads(baton("show", "user:carol").stdout)
    assert shown == {**json.loads(made.stdout), "scope": "user:carol"}
    assert (shown["usd"], shown["tokens"], shown["period"], shown["spent_usd"]) == (2.5, 9000, "day", 0.0)
    assert baton("set", "team:x", "--usd", "1").returncode == 2
    assert baton("set", "user:carol").returncode == 2  # no limit given

    async def from_async() -> tuple[dict[str, Any], dict[str, Any]]:
        async with shared.stack.async_client() as ac:
            seen = await ac.budget("user:carol")
            cleared = await ac.clear_budget("user:carol")
            return seen, cleared

    seen, cleared = asyncio.run(from_async())
    assert seen == shown and cleared == {"scope": "user:carol", "cleared": True}
    gone = baton("show", "user:carol")
    assert gone.returncode == 2 and "no budget is set for user:carol" in gone.stderr


@pytest.fixture
def priced_stack(stack: Stack) -> Stack:
    stack.env.update(AGENTS)
    return stack


STALL = failing(
    Fault(kind="stall", seconds=60, after_events=2),
    like=Reply([{"type": "text", "text": "a long think"}], input_tokens=2000),
)


def test_a_drained_run_is_charged_each_attempt_the_fake_answered_once(priced_stack: Stack, tmp_path: Path):
    """A run's tool step is answered, its next attempt cut by a drain, and finished by another worker: the budget
    spent exactly the three attempts the fake billed (the cut one at what it reported), the replayed step was not
    charged again, and nothing is left reserved."""
    stack = priced_stack
    first = Reply(tool_call("record_note", {"note": "x"}).content, input_tokens=800, output_tokens=30)
    final = Reply(text("drained and done").content, input_tokens=900, output_tokens=20)
    stack.fake_api.set_handler(Script([first, STALL, final]))
    worker_a = stack.worker("a")
    client = stack.client()
    client.set_budget("run:drained", usd=5.0, tokens=1_000_000, period="total")
    ref = client.start_run("drain me", tmp_path, run_id="drained", agent="priced")
    assert stack.fake_api.wait_for_requests(2, timeout=30)
    stack.worker("b")
    worker_a.terminate()
    worker_a.wait_exit(timeout=15)
    status = client.wait(ref, timeout=WAIT)
    assert status.status == "completed", status
    answered = billed(first) + billed(STALL, cut=True) + billed(final)
    spent = client.budget("run:drained")
    assert spent["spent_tokens"] == tokens(answered) and spent["reserved_tokens"] == 0
    assert spent["spent_usd"] == pytest.approx(cost_usd(answered, PRICE), abs=1e-9) == status.usage.cost_usd
    assert budgets.held(redis.Redis.from_url(stack.redis_server.url), "run:drained") == {}


def test_a_worker_lost_mid_attempt_is_charged_the_attempts_worst_case(priced_stack: Stack, tmp_path: Path):
    """SIGKILL the worker while an attempt streams: the attempt may have been billed, so the sweep that recovers the
    run settles its reservation at the worst case; spent is the answered attempts plus that, nothing stays held."""
    stack, env = priced_stack, {"BATON_LEASE_TTL": "3"}
    first = Reply(tool_call("record_note", {"note": "y"}).content, input_tokens=700, output_tokens=30)
    final = Reply(text("recovered").content, input_tokens=900, output_tokens=20)
    stack.fake_api.set_handler(Script([first, STALL, final]))
    worker_a = stack.worker("a", **env)
    client = stack.client(**env)
    client.set_budget("run:lost", tokens=1_000_000, period="total")
    ref = client.start_run("lose me", tmp_path, run_id="lost", agent="priced")
    assert stack.fake_api.wait_for_requests(2, timeout=30)
    wait_until(lambda: client.budget("run:lost")["reserved_tokens"] > 0, 10, what="the stalled attempt's reservation")
    worst = client.budget("run:lost")["reserved_tokens"]
    stack.worker("b", **env)
    worker_a.kill9()
    status = client.wait(ref, timeout=WAIT)
    assert status.status == "completed" and status.reply == "recovered", status
    spent = client.budget("run:lost")
    assert worst > tokens(billed(STALL, cut=True))
    assert spent["spent_tokens"] == tokens(billed(first)) + worst + tokens(billed(final))
    assert spent["reserved_tokens"] == 0
    assert budgets.held(redis.Redis.from_url(stack.redis_server.url), "run:lost") == {}
