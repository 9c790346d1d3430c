"""The context budget's pure parts: the token estimate, elision (pairs kept, current round and people's words
untouched), the cut and the compaction after "prompt is too long", and the classification of that answer."""

from __future__ import annotations

import anthropic
import httpx2
import pytest

from agent.history.context import (
    ELIDED,
    Overflow,
    Sizes,
    choose_cut,
    compaction_for,
    elide,
    estimate_tokens,
    max_cut,
    request_tokens,
    result_cap_chars,
)
from agent.loop.failures import FailureClass, classify
from agent.loop.policy import TABLE, Driver
from agent.provider.anthropic_errors import overflow_in
from tests.support.fake_anthropic_sse import validate_request

BIG = "r" * 4000


def run_messages(rounds: int, size: int = 4000) -> list[dict]:
    """A coding run's wire messages: the goal, then `rounds` rounds of one read and its (large) result."""
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "the goal " + "g" * 100}]}]
    for i in range(rounds):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"reading {i}"},
            {"type": "tool_use", "id": f"t{i}", "name": "read_file", "input": {"path": f"f{i}"}},
        ]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                                      "content": f"{i}:" + "r" * size}]})
    return messages


def test_estimate_is_bytes_of_canonical_json_over_four_rounded_up():
    """ceil(UTF-8 bytes of the sorted, space-free JSON / 4): key order and spacing do not change it, and
    multi-byte characters count by their bytes."""
    assert estimate_tokens({"b": 1, "a": "xy"}) == estimate_tokens({"a": "xy", "b": 1}) == 4  # {"a":"xy","b":1}
    assert estimate_tokens("é") == 1 and estimate_tokens("é" * 4) == 3  # 10 bytes with the quotes
    assert estimate_tokens(None) == 0 and estimate_tokens([]) == 0
    messages = run_messages(2)
    assert request_tokens([], None, messages) == sum(estimate_tokens(m) for m in messages)


def test_elision_keeps_every_pair_and_never_touches_people_or_the_current_round():
    """Results before the cut become the marker, with their tool_use_id and is_error kept; the goal, the model's
    calls and the latest round's results are untouched; the API's pairing check still passes; the input is
    not mutated; eliding again is a no-op."""
    messages = run_messages(4)
    messages[2]["content"][0]["is_error"] = True
    before = repr(messages)
    out = elide(messages, max_cut(messages))
    assert repr(messages) == before
    assert validate_request({"model": "m", "max_tokens": 1, "messages": out, "tools": [{"name": "t"}]}) is None
    assert out[0] == messages[0]  # the goal
    assert [m for m in out if m["role"] == "assistant"] == [m for m in messages if m["role"] == "assistant"]
    assert out[-1] == messages[-1]  # the current round's results
    for i in (2, 4, 6):
        (block,) = out[i]["content"]
        assert block["tool_use_id"] == f"t{i // 2 - 1}" and block["content"] == ELIDED.format(chars=4002)
    assert out[2]["content"][0]["is_error"] is True
    assert elide(out, max_cut(out)) == out


def test_max_cut_stops_before_the_current_round_or_the_persons_latest_message():
    """The cut may reach the latest tool results but never include them; once the person has written again, it
    may reach (not include) that message: the finished turns before it are old, results and files alike."""
    messages = run_messages(3)
    assert max_cut(messages) == len(messages) - 1
    assert max_cut(messages[:1]) == 0
    chat = [*messages, {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
            {"role": "user", "content": [{"type": "text", "text": "next question"}]}]
    assert max_cut(chat) == len(chat) - 1
    shots = [{"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image", "source": {}}]},
             {"role": "assistant", "content": [{"type": "text", "text": "seen"}]},
             {"role": "user", "content": [{"type": "text", "text": "and this?"}, {"type": "image", "source": {}}]}]
    assert max_cut(shots) == 2  # a chat without tools: the first screenshot may go, the latest stays
    assert [b["type"] for b in elide(shots, 2)[0]["content"]] == ["text", "text"]
    assert [b["type"] for b in elide(shots, 2)[2]["content"]] == ["text", "image"]


def test_choose_cut_keeps_the_cut_while_it_fits_then_elides_oldest_first_to_the_watermark():
    """Under the budget nothing moves (the cached prefix stays valid); past it, the smallest cut that reaches the
    target, in one batch; the cut never moves backwards; beyond what may be elided, the furthest cut."""
    messages = run_messages(10)
    total = request_tokens([], None, messages)
    assert choose_cut(0, messages, current=0, budget=total, target=0).cut == 0
    fit = choose_cut(0, messages, current=0, budget=total - 1, target=total // 2)
    assert 0 < fit.cut < max_cut(messages) and fit.tokens <= total // 2
    assert request_tokens([], None, elide(messages, fit.cut)) == fit.tokens
    shorter = choose_cut(0, messages, current=fit.cut - 1, budget=fit.tokens, target=total // 2)
    assert shorter.cut == fit.cut  # the same smallest cut, found from an earlier one
    assert choose_cut(0, messages, current=fit.cut, budget=total, target=0).cut == fit.cut  # never backwards
    furthest = choose_cut(0, messages, current=0, budget=10, target=5)
    assert furthest.cut == max_cut(messages) and furthest.tokens > 10


def test_choose_cut_is_deterministic():
    """The same inputs give the same cut and the same bytes, whatever ran before (a replay elides the same)."""
    a, b = run_messages(8), run_messages(8)
    first = choose_cut(100, a, current=0, budget=5000, target=3000)
    assert first == choose_cut(100, b, current=0, budget=5000, target=3000)
    assert repr(elide(a, first.cut)) == repr(elide(b, first.cut))


def test_sizes_measure_each_message_once_as_a_run_grows(monkeypatch):
    import agent.history.context as context

    measured = []
    real = context.estimate_tokens
    monkeypatch.setattr(context, "estimate_tokens", lambda value: measured.append(1) or real(value))
    messages = run_messages(200, size=10)
    sizes = Sizes()
    cuts = []
    for n in range(1, len(messages) + 1, 2):  # a loop's view: the same dicts, two more each step
        cuts.append(choose_cut(0, messages[:n], current=0, budget=2000, target=1000, sizes=sizes))
    # Once for each message, plus once more elided for each holding results: linear, not a pass per step.
    assert len(measured) == len(messages) + 200
    assert cuts[-1] == choose_cut(0, messages, current=0, budget=2000, target=1000)


def test_sizes_measure_a_new_dict_even_where_an_old_one_was():
    sizes = Sizes()
    first = [{"role": "user", "content": "short"}]
    assert sizes.of(first)[0] == [estimate_tokens(first[0])]
    second = [{"role": "user", "content": "much longer than the first " * 10}]
    assert sizes.of(second)[0] == [estimate_tokens(second[0])]


def test_a_loops_requests_measure_its_tools_and_system_once_while_they_stay_the_same(monkeypatch):
    import agent.history.request as request

    measured = []
    real = request.estimate_tokens
    monkeypatch.setattr(request, "estimate_tokens", lambda value: measured.append(value) or real(value))
    tools = [{"name": "peek", "description": "look a key up", "input_schema": {"type": "object"}}]
    shape = request.RequestShape("claude-x", tools, "be brief", False, 200_000)
    messages = run_messages(4)
    sizes = Sizes()
    fits = [request.plan_cut(shape, messages, current=0, sizes=sizes) for _ in range(3)]
    assert measured == [tools, "be brief"]  # the first step's two estimates, none after
    assert fits[0] == request.plan_cut(shape, messages, current=0)  # the same cut as measuring again
    longer = request.RequestShape("claude-x", tools, "be brief, and say why", False, 200_000)
    assert request.plan_cut(longer, messages, current=0, sizes=sizes).tokens > fits[0].tokens  # another system
    more = [*tools, {"name": "write", "description": "write a file", "input_schema": {"type": "object"}}]
    assert request.plan_cut(request.RequestShape("claude-x", more, "be brief", False, 200_000), messages, current=0,
                            sizes=sizes).tokens > fits[0].tokens  # another tool list


def test_compaction_scales_by_the_providers_count():
    """"N tokens > M maximum": our estimate is scaled by N / (our estimate of that request) and aimed at half of
    min(budget, M); without figures, the refused request's own estimate is the ceiling."""
    plan = compaction_for(Overflow(3000, 2000), sent_estimate=1500, budget=200_000)
    assert plan.ceiling == 1000 and plan.target == 500
    plan = compaction_for(None, sent_estimate=1500, budget=200_000)
    assert plan.ceiling == 1499 and plan.target == 749
    assert compaction_for(Overflow(900, 1000), sent_estimate=1000, budget=800).ceiling == 800


def test_result_cap_follows_a_small_budget():
    """A tool result keeps at most an eighth of a small budget (in estimated characters), else the default."""
    assert result_cap_chars(200_000, 16_000) == 16_000
    assert result_cap_chars(4000, 16_000) == 2000


def _bad_request(message: str, status: int = 400) -> anthropic.APIStatusError:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    response = httpx2.Response(status, request=httpx2.Request("POST", "http://x/v1/messages"), json=body)
    return anthropic.BadRequestError(f"Error code: {status} - {body}", response=response, body=body)


def test_prompt_is_too_long_is_context_overflow_and_not_retryable():
    """The API's 400 "prompt is too long" is `context_overflow` (its figures parsed), any other 400 stays
    `provider_bad_request`; the class is in the table for both drivers, never retried or resumed."""
    err = _bad_request("prompt is too long: 210000 tokens > 200000 maximum")
    assert classify(err).failure_class is FailureClass.CONTEXT_OVERFLOW
    assert overflow_in(str(err)) == Overflow(210000, 200000)
    assert classify(_bad_request("prompt is too long")).failure_class is FailureClass.CONTEXT_OVERFLOW
    assert overflow_in("prompt is too long") == Overflow(None, None)
    assert classify(_bad_request("max_tokens: Field required")).failure_class is FailureClass.PROVIDER_BAD_REQUEST
    for driver in Driver:
        policy = TABLE[(driver, FailureClass.CONTEXT_OVERFLOW)]
        assert not policy.retryable and not policy.replay_in_request and policy.auto_resumes == 0 and policy.reason


@pytest.mark.parametrize("text", ["", "overloaded", "the prompt is fine"])
def test_other_messages_are_no_overflow(text):
    """Only the API's words count as an overflow."""
    assert overflow_in(text) is None
