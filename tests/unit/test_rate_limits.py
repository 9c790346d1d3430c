"""Fleet-wide rate limits: the headers read, the shared count's script (on fakeredis with Lua), the wait before
sending, the agents that must agree, and the fakes' own limit."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from email.utils import format_datetime

import fakeredis
import httpx2
import pytest
from pydantic import ValidationError

from agent import Agent, RateLimits
from agent.agents import AgentError, Registry
from agent.errors import Cancelled
from agent.loop.cancel import CancelToken
from agent.loop.failures import FailureClass, classify
from agent.messages import TextBlock
from agent.provider.base import Answer, AttemptFailed, Endpoint, ProviderRequest, TextSink, TokenUsage
from agent.provider.rate_gate import Admission, LimitedProvider, RateLimited, endpoint_identity
from agent.provider.rate_headers import duration_seconds, read_headers, retry_after, rfc3339_seconds
from tasks.store.rate_limits import RedisGate
from tests.support.fake_rate_limit import FixedWindow, go_duration, most_in_window

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC).timestamp()


# -- headers --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("6m0s", 360.0), ("1.5s", 1.5), ("12ms", 0.012), ("1h2m3s", 3723.0), ("0s", 0.0), ("", None), ("soon", None),
     ("6m0", None)],
)
def test_openai_durations(text: str, seconds: float | None) -> None:
    """OpenAI's resets are Go durations; anything else reads as nothing."""
    assert duration_seconds(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_rfc3339_resets_are_absolute() -> None:
    assert rfc3339_seconds("2026-12-03T12:00:30Z", now=NOW) == 30
    assert rfc3339_seconds("2026-12-03T11:59:00Z", now=NOW) == 0  # already past
    assert rfc3339_seconds("2026-12-03T12:00:30", now=NOW) is None  # no zone: unreadable, not guessed
    assert rfc3339_seconds("tomorrow", now=NOW) is None


def test_retry_after_in_seconds_milliseconds_or_a_date() -> None:
    assert retry_after({"retry-after": "7"}, now=NOW) == 7
    assert retry_after({"retry-after-ms": "250", "retry-after": "7"}, now=NOW) == 0.25
    date = format_datetime(datetime.fromtimestamp(NOW + 20, UTC), usegmt=True)
    assert retry_after({"retry-after": date}, now=NOW) == 20
    assert retry_after({"retry-after": "whenever"}, now=NOW) is None
    assert retry_after({}, now=NOW) is None


def test_anthropic_limit_at_zero_waits_for_its_reset() -> None:
    """Only a limit whose remaining is 0 asks for a wait, the latest reset among them."""
    headers = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-12-03T12:00:10Z",
        "anthropic-ratelimit-output-tokens-remaining": "0",
        "anthropic-ratelimit-output-tokens-reset": "2026-12-03T12:00:25Z",
        "anthropic-ratelimit-input-tokens-remaining": "5000",
        "anthropic-ratelimit-input-tokens-reset": "2026-12-03T12:00:59Z",
    }
    said = read_headers(headers, now=NOW)
    assert (said.wait, said.exhausted_limit, said.retry_after) == (25, "output-tokens", None)


def test_openai_limit_at_zero_and_retry_after() -> None:
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m0s",
               "x-ratelimit-remaining-tokens": "100", "x-ratelimit-reset-tokens": "2s", "retry-after": "3"}
    said = read_headers(headers, now=NOW)
    assert (said.exhausted, said.retry_after, said.wait) == (60, 3, 60)


def test_answers_with_room_ask_for_nothing() -> None:
    headers = {"anthropic-ratelimit-requests-remaining": "49", "anthropic-ratelimit-requests-reset": "bogus",
               "x-ratelimit-remaining-requests": "nan?", "x-ratelimit-reset-requests": "1s"}
    assert read_headers(headers, now=NOW).wait == 0
    assert read_headers({}, now=NOW).wait == 0


def test_the_headers_of_an_http_answer_are_read_whatever_their_case_among_others() -> None:
    """As an SDK hands them over: an HTTP client's headers, names in any case, among the answer's other headers."""
    headers = httpx2.Headers([("Content-Type", "text/event-stream"), ("Request-Id", "req_1"),
                              ("Anthropic-RateLimit-Requests-Remaining", "0"),
                              ("anthropic-ratelimit-requests-reset", "2026-12-03T12:00:10Z"),
                              ("Anthropic-Ratelimit-Requests-Limit", "50"), ("Retry-After", "3")])
    said = read_headers(headers, now=NOW)
    assert (said.wait, said.exhausted_limit, said.retry_after, said.requests_limit) == (10, "requests", 3, 50)
    assert read_headers({"Retry-After-Ms": "1500"}, now=NOW).retry_after == 1.5


# -- the definition -------------------------------------------------------------------------------------------------


def test_rate_limits_need_one_positive_limit() -> None:
    with pytest.raises(ValidationError):
        RateLimits()
    with pytest.raises(ValidationError):
        RateLimits(requests_per_minute=0)
    assert RateLimits(output_tokens_per_minute=8000).as_args() == [0, 0, 8000]


def test_agents_on_one_endpoint_must_agree() -> None:
    """Refused at start, naming both agents; other models or base URLs are other endpoints."""
    limited = Agent(name="fast", rate_limits=RateLimits(requests_per_minute=50))
    with pytest.raises(AgentError, match=r"'fast' and 'slow'.*must agree"):
        Registry.build([limited, Agent(name="slow")], provider="anthropic", model="m", servers=[])
    with pytest.raises(AgentError, match="'fast' and 'pick'"):
        Registry.build([limited, Agent(name="pick", model="x", models=("x", "m"))], provider="anthropic", model="m",
                       servers=[])
    Registry.build([limited, Agent(name="other", model="n"), Agent(name="elsewhere", base_url="http://proxy")],
                   provider="anthropic", model="m", servers=[])
    same = Agent(name="same", instructions="hi", rate_limits=RateLimits(requests_per_minute=50))
    registry = Registry.build([limited, same], provider="anthropic", model="m", servers=[])
    fast = registry.get("fast")
    assert fast is not None and fast.rate_limits == RateLimits(requests_per_minute=50)
    assert type(fast).from_dict(fast.as_dict()).rate_limits == fast.rate_limits
    assert fast.version == Registry.build([Agent(name="fast")], provider="anthropic", model="m",
                                          servers=[]).agents["fast"].version  # limits are not what a unit runs


def test_endpoint_identity_holds_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-SECRET-1")
    first = endpoint_identity("anthropic", Endpoint())
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-SECRET-2")
    assert "SECRET" not in first and first != endpoint_identity("anthropic", Endpoint())
    monkeypatch.setenv("TEAM_KEY", "sk-ant-SECRET-2")
    same_key = endpoint_identity("anthropic", Endpoint(api_key_env="TEAM_KEY"))
    assert same_key == endpoint_identity("anthropic", Endpoint())
    assert endpoint_identity("anthropic", Endpoint(base_url="http://proxy/")).split("|")[1] == "http://proxy"


# -- the store's script ---------------------------------------------------------------------------------------------


@pytest.fixture
def gate() -> RedisGate:
    return RedisGate(fakeredis.FakeRedis(), "anthropic|http://x|abc", window=30.0)


def test_requests_per_minute_admit_until_the_limit(gate: RedisGate) -> None:
    limits = RateLimits(requests_per_minute=3)
    assert [gate.admit("m", limits, f"r{i}", 0, 0).admitted for i in range(4)] == [True, True, True, False]
    refused = gate.admit("m", limits, "r5", 0, 0)
    assert refused.reason == "requests_per_minute" and 29 < refused.wait <= 30  # the oldest leaves the window
    assert gate.admit("other-model", limits, "r6", 0, 0).admitted  # another model, another count


def test_a_refusal_counts_nothing_anywhere(gate: RedisGate) -> None:
    """All or nothing: refused on output tokens, the request is not counted as a request either."""
    limits = RateLimits(requests_per_minute=2, output_tokens_per_minute=100)
    assert gate.admit("m", limits, "a", 0, 100).admitted
    assert not gate.admit("m", limits, "b", 0, 1).admitted
    client = gate._client
    state = client.hgetall(gate._keys("m")[0])
    assert (state[b"r"], state[b"o"]) == (b"1", b"100")


def test_unused_output_tokens_are_given_back(gate: RedisGate) -> None:
    limits = RateLimits(output_tokens_per_minute=100)
    assert gate.admit("m", limits, "a", 0, 100).admitted
    assert gate.admit("m", limits, "b", 0, 100).reason == "output_tokens_per_minute"
    gate.settle("m", "a", 10)
    assert gate.admit("m", limits, "b", 0, 100).admitted  # 10 used + 100 reserved: one over, as the contract allows
    assert not gate.admit("m", limits, "c", 0, 1).admitted
    gate.settle("m", "a", 999)  # an answer never takes back more than it was given
    assert int(gate._client.hget(gate._keys("m")[0], "o")) == 110


def test_input_tokens_count_at_the_estimate(gate: RedisGate) -> None:
    limits = RateLimits(input_tokens_per_minute=1000)
    assert gate.admit("m", limits, "a", 999, 0).admitted
    assert gate.admit("m", limits, "b", 5000, 0).admitted  # under the limit before it: it goes (one over)
    assert gate.admit("m", limits, "c", 1, 0).reason == "input_tokens_per_minute"


def test_a_provider_wait_blocks_every_request(gate: RedisGate) -> None:
    gate.observe("m", {"retry-after": "20"})
    refused = gate.admit("m", None, "a", 0, 0)
    assert (refused.admitted, refused.reason) == (False, "provider_limit") and 19 < refused.wait <= 20
    gate.observe("m", {"retry-after": "5"})  # a shorter wait never shortens a longer one
    assert gate.admit("m", None, "a", 0, 0).wait > 19
    assert gate.admit("n", None, "a", 0, 0).admitted


def test_the_window_moves(gate: RedisGate) -> None:
    """Entries older than the window stop counting (a 50 ms window here, so the test need not wait a minute)."""
    quick = RedisGate(gate._client, "openai|http://y|def", window=0.05)
    limits = RateLimits(requests_per_minute=1)
    assert quick.admit("m", limits, "a", 0, 0).admitted
    refused = quick.admit("m", limits, "b", 0, 0)
    assert not refused.admitted
    token = CancelToken()
    token.wait(refused.wait + 0.01)  # time itself is what is awaited here
    assert quick.admit("m", limits, "b", 0, 0).admitted


# -- the wait before sending ----------------------------------------------------------------------------------------


class _Gate:
    """A gate that refuses with the waits given, then admits; records what it was told."""

    def __init__(self, waits: list[float]) -> None:
        self.waits = waits
        self.admits: list[tuple[int, int]] = []
        self.settled: list[int] = []

    def admit(self, model: str, limits: RateLimits | None, reservation: str, input_tokens: int,
              output_tokens: int) -> Admission:
        self.admits.append((input_tokens, output_tokens))
        if self.waits:
            return Admission(False, self.waits.pop(0), "requests_per_minute")
        return Admission(True)

    def settle(self, model: str, reservation: str, output_tokens: int) -> None:
        self.settled.append(output_tokens)


class _Provider:
    def __init__(self) -> None:
        self.sent = 0

    def stream(
        self, request: ProviderRequest, *, cancel: CancelToken, on_text: TextSink | None = None,
        on_reasoning: TextSink | None = None,
    ) -> Answer:
        self.sent += 1
        return Answer("m1", (TextBlock(text="hi"),), "end_turn", TokenUsage(10, 7))


REQUEST = ProviderRequest(model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=500)


def test_short_waits_happen_in_the_worker() -> None:
    gate, inner = _Gate([0.01, 0.02]), _Provider()
    limits = RateLimits(input_tokens_per_minute=10, output_tokens_per_minute=1000)
    answer = LimitedProvider(inner, gate, limits=limits, max_wait=1.0).stream(REQUEST, cancel=CancelToken())
    assert answer.usage.output_tokens == 7 and inner.sent == 1
    assert len(gate.admits) == 3 and gate.admits[0][0] > 0 and gate.admits[0][1] == 500
    assert gate.settled == [7]  # the 493 output tokens not used go back


def test_a_long_wait_goes_back_to_the_queue_unsent() -> None:
    gate, inner = _Gate([0.2, 3.0]), _Provider()
    provider = LimitedProvider(inner, gate, limits=None, max_wait=1.0)
    with pytest.raises(RateLimited) as raised:
        provider.stream(REQUEST, cancel=CancelToken())
    assert raised.value.delay == 3.0 and inner.sent == 0 and gate.settled == []


def test_a_stop_ends_the_wait() -> None:
    cancel = CancelToken()
    cancel.cancel("stop")
    with pytest.raises(Cancelled):
        LimitedProvider(_Provider(), _Gate([0.5]), limits=None, max_wait=5).stream(REQUEST, cancel=cancel)


# -- the fakes' limit -----------------------------------------------------------------------------------------------


def test_fixed_window_and_its_counts() -> None:
    now = [100.0]
    window = FixedWindow(2, 10.0, clock=lambda: now[0])
    first, second, third = window.take(), window.take(), window.take()
    assert (first.remaining, second.remaining, third.admitted) == (1, 0, False)
    assert third.retry_after(now[0]) == 10
    now[0] = 110.0
    assert window.take().admitted
    assert most_in_window([0, 1, 59, 60, 61, 130], 60) == 4
    assert (go_duration(0.25), go_duration(2.5), go_duration(61)) == ("250ms", "2.500s", "1m1.000s")



def test_the_requests_left_are_counted_down_by_the_fleet(gate: RedisGate) -> None:
    """The provider said 2 left: two more requests go, the third waits for the reset (before any answer says 0);
    a later answer of the same window cannot raise the count, a new window's replaces it."""
    gate.observe("m", {"x-ratelimit-remaining-requests": "2", "x-ratelimit-reset-requests": "10s"})
    assert [gate.admit("m", None, f"r{i}", 0, 0).admitted for i in range(3)] == [True, True, False]
    gate.observe("m", {"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "9.5s"})
    refused = gate.admit("m", None, "r4", 0, 0)
    assert (refused.admitted, refused.reason) == (False, "provider_limit") and 9 < refused.wait <= 10
    gate.observe("m", {"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "1m0s"})
    assert gate.admit("m", None, "r5", 0, 0).admitted


def test_a_new_windows_first_answer_counts_the_requests_sent_with_it(gate: RedisGate) -> None:
    """A window of 10 ends and eight waiting requests go at once, uncounted: the first answer of the next window says 9
    are left (it was the first to arrive), but seven more are on their way, so 2 are left, not 9. An answer of the
    window that ended, arriving late, says nothing of the next one."""
    said = {"anthropic-ratelimit-requests-limit": "10", "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "2000-01-01T00:00:00Z"}  # long over
    gate.observe("m", {**said, "anthropic-ratelimit-requests-remaining": "3",
                       "anthropic-ratelimit-requests-reset": _in(30)})
    state = gate._keys("m")[0]
    gate._client.hset(state, "left_until", 0)  # that window is over
    assert all(gate.admit("m", None, f"r{i}", 0, 0).admitted for i in range(8))
    gate.observe("m", said)  # a late answer of the window that ended
    gate.observe("m", {**said, "anthropic-ratelimit-requests-remaining": "9",
                       "anthropic-ratelimit-requests-reset": _in(30)})
    assert [gate.admit("m", None, f"s{i}", 0, 0).admitted for i in range(3)] == [True, True, False]


def test_the_first_answer_a_fleet_gets_counts_the_requests_sent_with_it(gate: RedisGate) -> None:
    """Nothing said yet (a fleet starting): eight requests go at once; the first answer says 9 of 10 are left, and 2
    are."""
    assert all(gate.admit("m", None, f"r{i}", 0, 0).admitted for i in range(8))
    gate.observe("m", {"anthropic-ratelimit-requests-limit": "10", "anthropic-ratelimit-requests-remaining": "9",
                       "anthropic-ratelimit-requests-reset": _in(30)})
    assert [gate.admit("m", None, f"s{i}", 0, 0).admitted for i in range(3)] == [True, True, False]


def _in(seconds: float) -> str:
    """An RFC 3339 reset `seconds` from now, in whole seconds as the API writes it."""
    return datetime.fromtimestamp(math.ceil(time.time() + seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_requests_left_read_from_either_api() -> None:
    anthropic = read_headers({"anthropic-ratelimit-requests-remaining": "7",
                              "anthropic-ratelimit-requests-reset": "2026-12-03T12:00:05Z"}, now=NOW)
    assert (anthropic.requests_left, anthropic.requests_reset, anthropic.wait) == (7, 5, 0)
    openai = read_headers({"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "850ms"}, now=NOW)
    assert (openai.requests_left, openai.requests_reset) == (3, pytest.approx(0.85))
    assert read_headers({"x-ratelimit-remaining-requests": "3"}, now=NOW).requests_left is None  # no reset: unsaid


class _Refusing(_Provider):
    def stream(
        self, request: ProviderRequest, *, cancel: CancelToken, on_text: TextSink | None = None,
        on_reasoning: TextSink | None = None,
    ) -> Answer:
        self.sent += 1
        refusal = RateLimited(30.0, "a 429 asking for 30 s")  # classified provider_rate_limited, retry-after 30
        raise AttemptFailed(refusal, TokenUsage(12, 0), had_output=False)


def test_a_429s_wait_is_the_gates_not_the_replays() -> None:
    """The refused attempt is still a failed attempt (replayed in the budget), but its retry-after no longer makes the
    replay sleep: the next admission waits for the shared block, or hands the unit back to the queue."""
    gate = _Gate([])
    with pytest.raises(AttemptFailed) as raised:
        LimitedProvider(_Refusing(), gate, limits=RateLimits(output_tokens_per_minute=10), max_wait=5).stream(
            REQUEST, cancel=CancelToken())
    found = classify(raised.value.cause)
    assert (found.failure_class, found.retry_after) == (FailureClass.PROVIDER_RATE_LIMITED, None)
    assert raised.value.usage.input_tokens == 12 and gate.settled == [0]
