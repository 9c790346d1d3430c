"""Issue 4, stream replay, end to end: a provider stream that breaks mid-answer is discarded and re-sent
inside one shared retry budget. Real redis-server, real celery worker, the real SDK against the fake API.

One worker serves the whole module (a worker start plus its warm shutdown costs ~6 s, and these are a dozen
cases). Tests stay independent: each sends its own chat and its own first message, and the fake server routes
every request by that first message to the test's own `Conversation`, which scripts the replies and records
the requests (bodies and arrival times) that reached it. A stray request from another test can never consume
a reply scripted here. The worker runs with `BATON_STREAM_IDLE_TIMEOUT=1` (for the stall case; nothing else
goes silent for a second) and `BATON_RETRY_BUDGET=4`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
import redis

from tests.conftest import PROVIDERS, Stack, fake_server
from tests.support import counting_tools
from tests.support.fake_anthropic import FakeMessagesServer, Fault, Reply, Script, failing, text, tool_call
from tests.support.fake_anthropic_sse import first_user_text
from tests.support.processes import RedisServer

pytestmark = pytest.mark.integration

WAIT = 45  # seconds a turn may take; far above what any case here needs
IDLE_TIMEOUT = 1
BUDGET = 4


class Conversation:
    """One test's scripted replies, and the requests that reached them with their arrival times."""

    def __init__(self, replies: Iterable[Reply]) -> None:
        self.script = Script(replies)
        self.bodies: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any], index: int) -> Reply:
        with self._lock:
            self.arrivals.append(time.monotonic())
            self.bodies.append(body)
        return self.script(body, index)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.bodies)


class Router:
    """The fake server's handler: a request goes to the Conversation registered for its first user text."""

    def __init__(self) -> None:
        self.routes: dict[str, Conversation] = {}

    def __call__(self, body: dict[str, Any], index: int) -> Reply:
        first = first_user_text(body)
        conversation = self.routes.get(first)
        if conversation is None:
            return failing(Fault("http", status=500, message=f"no conversation for first message {first!r}"))
        return conversation(body, index)


class Shared:
    """The module's stack, router and client."""

    def __init__(self, stack: Stack, router: Router) -> None:
        self.stack = stack
        self.router = router
        self.client = stack.client()
        self.redis = redis.Redis.from_url(stack.redis_server.url)

    def send(self, chat_id: str, replies: Iterable[Reply]) -> tuple[Conversation, Any]:
        """Script `chat_id`'s replies, send its first message, and wait for the turn to settle."""
        message = f"{chat_id}: please answer"
        conversation = Conversation(replies)
        self.router.routes[message] = conversation
        ref = self.client.send_message(chat_id, message)
        result = self.client.wait(ref, timeout=WAIT)
        assert result.status in ("completed", "failed"), f"turn did not settle: {result}"
        return conversation, result

    def events(self, chat_id: str, kind: str) -> list[dict[str, Any]]:
        return [e.model_dump() for e in self.client.events(chat_id) if e.type == kind]

    def assistant(self, chat_id: str) -> list[Any]:
        return [m for m in self.client.transcript(chat_id) if m.role == "assistant"]

    def transcript_dump(self, chat_id: str) -> str:
        return "\n".join(m.model_dump_json() for m in self.client.transcript(chat_id))


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Shared]]:
    """The module's stack for a provider, started on first use (a module that runs one provider starts one)."""
    made: dict[str, tuple[Shared, RedisServer, FakeMessagesServer]] = {}

    def get(provider: str) -> Shared:
        if provider not in made:
            tmp = tmp_path_factory.mktemp(f"stream-replay-{provider}")
            router = Router()
            redis_server = RedisServer(tmp / "redis").start()
            fake_api = fake_server(provider).start()
            stack = Stack(redis_server, fake_api, tmp)
            made[provider] = (Shared(stack, router), redis_server, fake_api)
            fake_api.set_handler(router)
            stack.worker(BATON_STREAM_IDLE_TIMEOUT=str(IDLE_TIMEOUT), BATON_RETRY_BUDGET=str(BUDGET))
        return made[provider][0]

    yield get
    for s, redis_server, fake_api in made.values():
        s.client.close()
        s.redis.close()
        s.stack.stop()
        fake_api.stop()
        redis_server.stop()


@pytest.fixture
def shared(stacks: Callable[[str], Shared], provider: str) -> Shared:
    return stacks(provider)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_partial_text_then_drop_is_replayed_and_only_the_replay_reaches_the_transcript(shared):
    """A stream that drops after part of its text is discarded and re-sent: the reply is the replayed answer
    exactly once, a `turn.retry` says so (discarded, message_id, attempt, reason), the same request went out
    twice, and the transcript holds exactly one assistant text message, without the discarded words."""
    draft = text("DISCARDED draft that never finishes")
    conv, result = shared.send("drop-text", [failing(Fault("drop", after_events=5), like=draft), text("Final answer.")])

    assert result.status == "completed", result
    assert result.reply == "Final answer."
    assert result.failure is None
    assert conv.count == 2
    assert conv.bodies[0] == conv.bodies[1], "a replay must re-send the very same request"

    retries = shared.events("drop-text", "turn.retry")
    assert len(retries) == 1, retries
    retry = retries[0]
    assert retry["discarded"] is True
    assert retry["message_id"] and retry["turn_id"] == result.turn_id
    assert retry["attempt"] == 1
    assert retry["class"] == "infra_transient" and retry["reason"]
    assert retry["had_output"] is True

    assistant = shared.assistant("drop-text")
    assert len(assistant) == 1
    assert [b.type for b in assistant[0].content] == ["text"]
    assert assistant[0].content[0].text == "Final answer."
    assert "DISCARDED" not in shared.transcript_dump("drop-text")
    assert [e.type for e in shared.client.events("drop-text")] == [
        "turn.queued",
        "turn.started",
        "turn.retry",
        "turn.completed",
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    "after_events",
    [
        pytest.param(5, id="partial-tool-arguments"),  # block start, empty delta, first third of the JSON
        # Anthropic: all blocks and message_delta, no message_stop; OpenAI: every chunk up to finish_reason, no usage
        # chunk and no [DONE]. Either way the stream then breaks.
        pytest.param(9, id="complete-tool-use-no-message-stop"),
    ],
)
def test_a_broken_tool_call_stream_is_replayed_and_the_tool_runs_once(shared, after_events):
    """A stream that breaks inside (or right after) a tool_use, before `message_stop`, is replayed; no tool is
    dispatched from the broken attempt: the write tool runs exactly once, for the replayed call, and the
    discarded call's id appears nowhere (not in the transcript, not in the follow-up request)."""
    chat = f"drop-tool-{after_events}"
    note = f"exactly-once-{after_events}"
    broken = tool_call("record_note", {"note": note}, id="toolu_discarded")
    conv, result = shared.send(
        chat,
        [
            failing(Fault("drop", after_events=after_events), like=broken),
            tool_call("record_note", {"note": note}, id="toolu_kept"),
            text("Noted."),
        ],
    )

    assert result.status == "completed", result
    assert result.reply == "Noted."
    calls = [c.decode() for c in shared.redis.lrange(counting_tools.CALLS_KEY, 0, -1)]
    assert calls.count(f"record_note:{note}") == 1, calls
    assert conv.count == 3
    assert conv.bodies[0] == conv.bodies[1]
    assert "toolu_discarded" not in str(conv.bodies[2])
    assert "toolu_kept" in str(conv.bodies[2])

    retries = shared.events(chat, "turn.retry")
    assert len(retries) == 1 and retries[0]["discarded"] is True and retries[0]["message_id"]
    assert [e["tool_use_id"] for e in shared.events(chat, "tool.called")] == ["toolu_kept"]
    assert [e["tool_use_id"] for e in shared.events(chat, "tool.result")] == ["toolu_kept"]

    assert "toolu_discarded" not in shared.transcript_dump(chat)
    assistant = shared.assistant(chat)
    assert len(assistant) == 2
    assert [b.id for b in assistant[0].tool_uses] == ["toolu_kept"]
    assert assistant[1].text == "Noted."
    assert result.usage.attempts == 3 and result.usage.discarded_attempts == 1


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("fault", "failure_class"),
    [
        pytest.param(Fault("overloaded", after_events=4), "provider_overloaded", id="in-stream-overloaded"),
        pytest.param(Fault("http", status=529), "provider_overloaded", id="http-529"),
        pytest.param(Fault("http", status=500), "provider_server_error", id="http-500"),
        pytest.param(Fault("http", status=503), None, id="http-503"),
        pytest.param(Fault("http", status=429, retry_after=1), "provider_rate_limited", id="http-429"),
        pytest.param(Fault("stall", after_events=4, seconds=5), "provider_stall", id="stall-past-idle-timeout"),
    ],
)
def test_each_provider_fault_is_replayed_and_the_turn_completes(shared, fault, failure_class, request, provider):
    """Overload (in-stream event or HTTP 529), a 5xx, a 429 and a stall past the idle timeout each discard the
    attempt and re-send the request; the turn completes with the replayed answer. A 429's retry-after is
    honoured (the replay arrives >= 1 s later although backoff is scaled to 0); a stall is cut by the 1 s idle
    timeout, not by the server giving up after its 5 s. A 503 is overloaded on OpenAI, a server error on Anthropic
    (which says overloaded with its 529)."""
    if failure_class is None:
        failure_class = "provider_overloaded" if provider == "openai" else "provider_server_error"
    chat = f"fault-{request.node.callspec.id}"
    conv, result = shared.send(chat, [failing(fault, like=text("DISCARDED partial")), text("Recovered.")])

    assert result.status == "completed", result
    assert result.reply == "Recovered."
    assert conv.count == 2
    assert conv.bodies[0] == conv.bodies[1]
    retries = shared.events(chat, "turn.retry")
    assert len(retries) == 1, retries
    assert retries[0]["class"] == failure_class
    assert retries[0]["discarded"] is True and retries[0]["message_id"]
    gap = conv.arrivals[1] - conv.arrivals[0]
    if fault.retry_after is not None:
        assert gap >= fault.retry_after, f"replayed after {gap:.3f}s, before retry-after {fault.retry_after}s"
    if fault.kind == "stall":
        assert IDLE_TIMEOUT <= gap < fault.seconds - 1, f"the stall was not cut by the idle timeout ({gap:.2f}s)"
    assistant = shared.assistant(chat)
    assert len(assistant) == 1 and assistant[0].text == "Recovered."
    assert "DISCARDED" not in shared.transcript_dump(chat)
    assert result.usage.attempts == 2 and result.usage.discarded_attempts == 1


@pytest.mark.parametrize(
    ("replies", "failure_class", "retryable", "requests"),
    [
        pytest.param(
            [failing(Fault("drop", after_events=5), like=text("DISCARDED partial")) for _ in range(5)]
            + [text("never reached")],
            "infra_transient",
            True,
            BUDGET,
            id="five-drops-budget-four",
        ),
        pytest.param(
            [failing(Fault("http", status=401)), text("never reached")],
            "provider_auth",
            False,
            1,
            id="http-401-not-retried",
        ),
    ],
)
def test_a_turn_fails_with_its_class_when_replay_is_spent_or_pointless(
    shared, replies, failure_class, retryable, requests, request
):
    """Five drops in a row with budget 4: exactly 4 requests, then the turn fails as `infra_transient`,
    retryable, with no partial reply anywhere. A 401 is never replayed: 1 request, `provider_auth`, not
    retryable. Either way the transcript holds no assistant message and usage counts every attempt made,
    the last (failed) one included."""
    chat = f"spent-{request.node.callspec.id}"
    conv, result = shared.send(chat, replies)

    assert result.status == "failed", result
    assert result.reply is None
    assert result.failure is not None
    assert result.failure["class"] == failure_class
    assert result.failure["retryable"] is retryable
    time.sleep(0.5)  # a late extra request (a replay or an automatic resume) would show up here
    assert conv.count == requests
    assert not shared.assistant(chat)
    assert "DISCARDED" not in shared.transcript_dump(chat)
    assert shared.client.turn(chat, result.turn_id).status == "failed"

    retries = shared.events(chat, "turn.retry")
    assert [e["attempt"] for e in retries] == list(range(1, requests))
    assert all(e["discarded"] is True and e["class"] == failure_class for e in retries)
    assert len({e["message_id"] for e in retries}) <= 1
    failed = shared.events(chat, "turn.failed")
    assert len(failed) == 1
    assert failed[0]["class"] == failure_class and failed[0]["retryable"] is retryable
    assert result.usage.attempts == requests
    assert result.usage.discarded_attempts == requests


def test_usage_counts_the_discarded_attempts(shared):
    """The turn's usage counts every attempt: `attempts` and `discarded_attempts`, and tokens summed over the
    attempts that reported usage (a drop before `message_start` reports none; a drop after it bills its input
    tokens and the output counted so far; an HTTP error reports none), plus the answer that completed."""
    billed = Reply([{"type": "text", "text": "DISCARDED partial"}], input_tokens=100)
    conv, result = shared.send(
        "usage",
        [
            failing(Fault("drop", after_events=0)),  # nothing streamed, no usage reported
            failing(Fault("drop", after_events=5), like=billed),  # message_start sent: usage reported
            failing(Fault("http", status=529)),  # an error response reports no usage
            Reply([{"type": "text", "text": "Counted."}], input_tokens=1000, output_tokens=50),
        ],
    )

    assert result.status == "completed", result
    assert result.reply == "Counted."
    assert conv.count == 4
    usage = result.usage
    assert usage.attempts == 4
    assert usage.discarded_attempts == 3
    assert usage.input_tokens == 100 + 1000
    # message_start reports 1 output token; the completed answer's message_delta reports its 50.
    assert usage.output_tokens == 1 + 50
    retries = shared.events("usage", "turn.retry")
    assert [e["attempt"] for e in retries] == [1, 2, 3]
    assert [e["usage"]["input_tokens"] for e in retries] == [0, 100, 0]  # each discard says what it was billed
    completed = shared.events("usage", "turn.completed")
    assert completed[0]["usage"] == usage.model_dump()
