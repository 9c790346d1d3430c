"""Long runs, end to end: prompt caching and the context budget (contract: "Long runs: prompt caching and the
context budget"). Real redis-server, real celery workers, the real SDK against the fake Messages API with its
cache semantics on (tests/support/fake_prompt_cache.py: a prefix cache per cache_control mark, usage as the API
reports it, the 4-mark limit, and "prompt is too long" past a context limit)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from agent.history.context import request_tokens
from tests.support.fake_anthropic import Fault, Script, failing, text, tool_call
from tests.support.fake_prompt_cache import breakpoint_count

pytestmark = pytest.mark.integration

WAIT = 90
CACHE_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _files(tmp_path: Path, n: int, size: int = 3000) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(n):
        (ws / f"f{i}.txt").write_text(f"file {i}\n" + ("abcdefghij" * (size // 10)))
    return ws


def _reads(n: int) -> list:
    return [tool_call("read_file", {"path": f"f{i}.txt"}, id=f"toolu_read{i}") for i in range(n)]


def _total(billed: dict) -> int:
    return sum(billed[f] for f in CACHE_FIELDS)


def _summed(billing: list[dict], field: str) -> int:
    return sum(b[field] for b in billing)


def _run(stack, goal: str, ws: Path, **env: str):
    stack.worker(**env)
    client = stack.client(**env)
    ref = client.start_run(goal, workspace=ws)
    return client, client.wait(ref, timeout=WAIT)


def test_each_next_step_of_a_run_reads_what_the_last_one_cached(stack, tmp_path):
    """A six-step run: the first request writes the cache, each next request reads the whole previous prompt
    from it (the rolling mark) and writes only what the last round added; every request carries 2-4 marks; the
    run's `usage` (status --json) sums exactly what the API billed, and each model step's run.step event carries
    its own usage."""
    stack.fake_api.prompt_cache = True
    stack.fake_api.set_handler(Script([*_reads(5), text("read them all")]))
    ws = _files(tmp_path, 5)
    client, status = _run(stack, "read five files", ws)
    assert status.status == "completed", status
    billing = stack.fake_api.billing
    assert len(billing) == 6 and stack.fake_api.rejections == []
    assert billing[0]["cache_read_input_tokens"] == 0 and billing[0]["cache_creation_input_tokens"] > 0
    for previous, billed in itertools.pairwise(billing):
        assert billed["cache_read_input_tokens"] == _total(previous)
        assert billed["input_tokens"] == 0  # the last mark ends the prompt: the rest is all a cache write
    assert all(2 <= breakpoint_count(body) <= 4 for body in stack.fake_api.requests)
    usage = client.run_status(status.run_id).usage
    for field in (*CACHE_FIELDS, "output_tokens"):
        assert getattr(usage, field) == _summed(billing, field), field
    assert usage.attempts == 6 and usage.discarded_attempts == 0
    steps = [e.model_extra for e in client.events(status.run_id) if e.type == "run.step"]
    model_usage = [s["usage"] for s in steps if s.get("kind") == "model"]
    assert [u["cache_read_input_tokens"] for u in model_usage] == [b["cache_read_input_tokens"] for b in billing]
    completed = [e.model_extra for e in client.events(status.run_id) if e.type == "run.completed"]
    assert completed[0]["usage"] == usage.model_dump()


def test_a_replayed_attempt_reads_the_cache_and_is_billed(stack, tmp_path):
    """A stream dropped after message_start is discarded and re-sent: the replay is the same request, byte for
    byte, and reads all of it from the cache the dropped attempt wrote; the run's usage counts both attempts."""
    stack.fake_api.prompt_cache = True
    dropped = failing(Fault("drop", after_events=3), like=text("this answer is cut"))
    stack.fake_api.set_handler(Script([*_reads(2), dropped, text("done")]))
    ws = _files(tmp_path, 2)
    client, status = _run(stack, "read then answer", ws)
    assert status.status == "completed", status
    requests, billing = stack.fake_api.requests, stack.fake_api.billing
    assert json.dumps(requests[2]) == json.dumps(requests[3])
    assert billing[3]["cache_read_input_tokens"] == _total(billing[2]) and billing[3]["input_tokens"] == 0
    assert billing[3]["cache_creation_input_tokens"] == 0
    usage = client.run_status(status.run_id).usage
    assert usage.attempts == 4 and usage.discarded_attempts == 1
    assert usage.cache_read_input_tokens == _summed(billing, "cache_read_input_tokens")


def test_a_resumed_round_reads_the_cache(stack):
    """A chat turn whose request fails (529) after a tool ran resumes from the stored round in a new execution:
    its request rebuilds the same bytes and reads the prefix the first request cached."""
    stack.fake_api.prompt_cache = True
    overloaded = failing(Fault("http", status=529))
    stack.fake_api.set_handler(Script([tool_call("lookup", {"key": "a"}), overloaded, text("A is 1")]))
    stack.worker(BATON_RETRY_BUDGET="1")
    client = stack.client(BATON_RETRY_BUDGET="1")
    result = client.wait(client.send_message("resume-cache", "what is a?"), timeout=WAIT)
    assert result.status == "completed" and result.resumed is True, result
    requests = stack.fake_api.requests
    assert len(requests) == 3 and json.dumps(requests[1]) == json.dumps(requests[2])
    first, resumed = stack.fake_api.billing  # the 529 was never billed
    assert resumed["index"] == 2 and resumed["cache_read_input_tokens"] == _total(first) > 0
    assert result.usage.cache_read_input_tokens == resumed["cache_read_input_tokens"]


def test_prompt_cache_off_sends_no_cache_control(stack, tmp_path):
    """BATON_PROMPT_CACHE=off: no request carries a mark, nothing is written or read, all input is plain."""
    stack.fake_api.prompt_cache = True
    stack.fake_api.set_handler(Script([*_reads(3), text("done")]))
    _, status = _run(stack, "read three files", _files(tmp_path, 3), BATON_PROMPT_CACHE="off")
    assert status.status == "completed", status
    assert all("cache_control" not in json.dumps(body) for body in stack.fake_api.requests)
    assert all(b["cache_read_input_tokens"] == b["cache_creation_input_tokens"] == 0 for b in stack.fake_api.billing)
    assert status.usage.cache_read_input_tokens == 0 and status.usage.input_tokens > 0


def test_a_run_that_outgrows_a_small_budget_completes_with_old_results_elided(stack, tmp_path):
    """45 reads of 4,000 characters under BATON_CONTEXT_TOKENS=8000 (a result may keep an eighth of the budget):
    the results add up to five times the budget, and the run completes; every request's estimate stays within
    the budget; old results carry the elision marker, the latest round never does; the fake API's pairing check
    never fires; the goal is sent unchanged every time."""
    stack.fake_api.set_handler(Script([*_reads(45), text("read them all")]))
    goal = "read forty-five files"
    _, status = _run(stack, goal, _files(tmp_path, 45, size=4000), BATON_CONTEXT_TOKENS="8000")
    assert status.status == "completed", status
    requests = stack.fake_api.requests
    assert len(requests) == 46 and stack.fake_api.rejections == []
    assert sum(len(json.dumps(r["messages"][-1])) for r in requests) > 5 * 4 * 8000  # results: 5x the budget
    for body in requests:
        assert request_tokens(body["tools"], body.get("system"), body["messages"]) <= 8000
        assert body["messages"][0]["content"][0]["text"] == goal
        assert "elided" not in json.dumps(body["messages"][-1])
    assert any("Old tool result elided" in json.dumps(body) for body in requests)


def test_prompt_too_long_compacts_once_and_the_run_completes(stack, tmp_path):
    """The provider's window (5,000 tokens) is smaller than BATON_CONTEXT_TOKENS: a step is refused with "prompt
    is too long", the run elides old results, re-sends once and completes; each refusal is one discarded
    attempt with class context_overflow, and is followed by a request that is accepted."""
    stack.fake_api.context_limit = 5000
    stack.fake_api.set_handler(Script([*_reads(12), text("read them all")]))
    client, status = _run(stack, "read twelve files", _files(tmp_path, 12))
    assert status.status == "completed", status
    too_long = stack.fake_api.too_long
    assert too_long and all(i + 1 not in too_long for i in too_long)
    assert stack.fake_api.request_count == 13 + len(too_long) and stack.fake_api.rejections == []
    discarded = [e.model_extra for e in client.events(status.run_id) if e.type == "run.step"
                 and e.model_extra.get("discarded")]
    assert [d["class"] for d in discarded] == ["context_overflow"] * len(too_long)
    assert status.usage.discarded_attempts == len(too_long)


def test_an_unfittable_run_fails_as_context_overflow_without_a_retry_loop(stack, tmp_path):
    """A result that alone passes the provider's window: the refused step has nothing old to elide, so the run
    fails as context_overflow (not retryable) after that one request, with no replay, no automatic resume."""
    stack.fake_api.context_limit = 2500
    stack.fake_api.set_handler(Script([tool_call("read_file", {"path": "f0.txt"}), text("never")]))
    client, status = _run(stack, "read one huge file", _files(tmp_path, 1, size=15000))
    assert status.status == "failed", status
    assert status.failure["class"] == "context_overflow" and status.failure["retryable"] is False
    assert stack.fake_api.too_long == [1] and stack.fake_api.request_count == 2
    failed = [e.model_extra for e in client.events(status.run_id) if e.type == "run.failed"]
    assert failed[0]["class"] == "context_overflow" and failed[0]["retryable"] is False


def test_a_run_requeued_by_a_drain_reads_the_cache(stack, tmp_path):
    """SIGTERM while a run's third step streams: the run moves to another worker, whose request for that step
    is the same bytes and reads all of it from the cache the cut attempt wrote; the run's usage bills the cut
    attempt too (journaled by the drained execution), so it sums exactly what the API billed."""
    stack.fake_api.prompt_cache = True
    stall = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking for a long time"))
    stack.fake_api.set_handler(Script([*_reads(2), stall, text("all done")]))
    ws = _files(tmp_path, 2)
    worker_a = stack.worker("a")
    client = stack.client()
    ref = client.start_run("read two files, then think", workspace=ws)
    assert stack.fake_api.wait_for_requests(3, timeout=30)  # worker a is mid-stream on the third step
    stack.worker("b")
    worker_a.terminate()
    worker_a.wait_exit(timeout=15)
    status = client.wait(ref, timeout=WAIT)
    assert status.status == "completed" and status.interruptions == 1, status
    requests, billing = stack.fake_api.requests, stack.fake_api.billing
    assert len(requests) == 4 and json.dumps(requests[2]) == json.dumps(requests[3])
    cut, requeued = billing[2], billing[3]
    assert cut["faulted"] and requeued["index"] == 3
    assert requeued["cache_read_input_tokens"] == _total(cut) and requeued["input_tokens"] == 0
    usage = status.usage
    assert (usage.attempts, usage.discarded_attempts) == (4, 1)
    for field in CACHE_FIELDS:
        assert getattr(usage, field) == _summed(billing, field), field
