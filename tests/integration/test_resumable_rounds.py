"""Resumable rounds, end to end: a turn that failed at the provider after a tool ran resumes from the stored round.

Real redis-server, real celery worker, the real SDK against the fake Messages API. Every worker runs with
`BATON_RETRY_BUDGET=1`, so one failing reply fails the request and the turn-level logic is what is tested.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest
import redis

from tasks.store import keys
from tests.conftest import PROVIDERS
from tests.support import counting_tools
from tests.support.fake_anthropic import Fault, Script, failing, text, tool_call
from tests.support.processes import REPO, wait_until

pytestmark = pytest.mark.integration

NOTICE = "Continued from the tool results already fetched."
OVERLOADED = failing(Fault(kind="http", status=529))
# How each provider says it is overloaded: Anthropic's 529, OpenAI's 503 (both `provider_overloaded`).
OVERLOADED_ON = {"anthropic": OVERLOADED, "openai": failing(Fault(kind="http", status=503))}


def _redis(stack) -> redis.Redis:
    return redis.Redis.from_url(stack.redis_server.url)


def _slot(chat_id: str) -> str:
    return keys.round_slot(keys.owner("chat", chat_id))


def _extra(event: Any) -> dict[str, Any]:
    return event.model_extra or {}


def _turn_events(client, chat_id: str, turn_id: str, kind: str) -> list[dict[str, Any]]:
    return [_extra(e) for e in client.events(chat_id) if e.type == kind and _extra(e).get("turn_id") == turn_id]


def _log_lines(worker, task_id: str, needle: str) -> list[str]:
    return [line for line in worker.log().splitlines() if task_id in line and needle in line]


def _wait_log(worker, task_id: str, needle: str) -> None:
    """The worker logs a task's end after storing its result; wait for the line rather than race it."""
    wait_until(lambda: _log_lines(worker, task_id, needle), 10, what=f"{needle!r} for {task_id} in the worker log")


def _tool_blocks(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The tool_use and tool_result blocks of a request's messages, in order."""
    blocks = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
    return [b for b in blocks if b["type"] == "tool_use"], [b for b in blocks if b["type"] == "tool_result"]


def _transcript_notices(client, chat_id: str, text_: str) -> int:
    return sum(1 for m in client.transcript(chat_id) if m.role == "notice" and m.text == text_)


def _fail_after_auto_resume(client, chat_id: str, question: str):
    """Send a turn scripted as tool call, 529, 529: it fails once the single automatic resume failed too."""
    ref = client.send_message(chat_id, question)
    result = client.wait(ref, timeout=30)
    assert result.status == "failed", result
    return ref, result


@pytest.mark.parametrize(("tool", "arguments"), [("lookup", {"key": "a"}), ("record_note", {"note": "n-1"})])
def test_a_provider_failure_after_a_tool_round_resumes_automatically_once(stack, tool, arguments):
    """A 529 after a tool ran is retried once as a Celery retry that resumes from the stored round: the tool
    (read or write) ran once, the resumed request carried the same tool_use/tool_result blocks, the notice is in
    the transcript once, the result says `resumed`, and the task went through exactly one retry (two executions)."""
    stack.fake_api.set_handler(Script([tool_call(tool, arguments), OVERLOADED, text("A is 1")]))
    worker = stack.worker(BATON_RETRY_BUDGET="1")
    client = stack.client(BATON_RETRY_BUDGET="1")
    r = _redis(stack)

    ref = client.send_message("auto", "what is a?")
    result = client.wait(ref, timeout=30)

    assert result.status == "completed" and result.reply == "A is 1", result
    assert result.resumed is True and result.failure is None
    assert result.turn_id == ref.turn_id and result.task_id == ref.task_id
    # Both executions' attempts count: the tool call, the discarded 529 (no usage reported), the answer.
    assert result.usage.model_dump() == {
        "input_tokens": 20,
        "output_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "attempts": 3,
        "discarded_attempts": 1,
    }
    assert counting_tools.calls(r, tool) == 1
    assert stack.fake_api.request_count == 3

    failed_req, resumed_req = stack.fake_api.requests[1]["messages"], stack.fake_api.requests[2]["messages"]
    uses, results = _tool_blocks(failed_req)
    assert len(uses) == 1 and uses[0]["name"] == tool and uses[0]["input"] == arguments
    assert len(results) == 1 and results[0]["tool_use_id"] == uses[0]["id"] and "(call 1)" in results[0]["content"]
    assert _tool_blocks(resumed_req) == (uses, results)
    assert resumed_req == failed_req  # the resumed request is the one that failed, structurally

    transcript = client.transcript("auto")
    assert _transcript_notices(client, "auto", NOTICE) == 1
    assert sum(1 for m in transcript for _ in m.tool_uses) == 1  # the stored round is not written twice
    assert sum(1 for m in transcript for _ in m.tool_results) == 1
    assert transcript[-1].role == "assistant" and transcript[-1].text == "A is 1"

    retries = _turn_events(client, "auto", ref.turn_id, "turn.retry")
    assert len(retries) == 1 and retries[0]["auto_resume"] is True and retries[0]["discarded"] is True
    assert retries[0]["class"] == "provider_overloaded"
    resumed = _turn_events(client, "auto", ref.turn_id, "turn.resumed")
    assert len(resumed) == 1 and resumed[0]["tools"] == [tool]
    completed = _turn_events(client, "auto", ref.turn_id, "turn.completed")
    assert len(completed) == 1 and completed[0]["resumed"] is True
    assert _turn_events(client, "auto", ref.turn_id, "turn.failed") == []
    assert len(_turn_events(client, "auto", ref.turn_id, "tool.result")) == 1

    _wait_log(worker, ref.task_id, "succeeded in")
    retry_lines = _log_lines(worker, ref.task_id, "Retry in")
    assert len(retry_lines) == 1 and "AutoResume(" in retry_lines[0]
    assert len(_log_lines(worker, ref.task_id, "] received")) == 2
    assert not r.exists(_slot("auto"))  # read and cleared by the resumed execution


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_second_failure_keeps_the_round_and_retry_resumes_it(stack, provider):
    """When the automatic resume fails too, the turn fails retryable with the round kept (TTL at most
    BATON_ROUND_TTL); `baton retry` within the TTL resumes it without running the tool again."""
    overloaded = OVERLOADED_ON[provider]
    stack.fake_api.set_handler(Script([tool_call("lookup", {"key": "a"}), overloaded, overloaded, text("A is 1")]))
    worker = stack.worker(BATON_RETRY_BUDGET="1", BATON_ROUND_TTL="600")
    r = _redis(stack)

    client = stack.client()
    ref, result = _fail_after_auto_resume(client, "twice", "what is a?")
    assert result.failure is not None and result.failure["retryable"] is True
    assert result.failure["class"] == "provider_overloaded"
    assert (result.usage.attempts, result.usage.discarded_attempts) == (3, 2)
    failed = _turn_events(client, "twice", ref.turn_id, "turn.failed")
    assert len(failed) == 1 and failed[0]["resumable_round"] is True and failed[0]["retryable"] is True
    assert len(_turn_events(client, "twice", ref.turn_id, "turn.retry")) == 1  # one automatic resume, not two
    assert stack.fake_api.request_count == 3
    assert stack.fake_api.requests[2] == stack.fake_api.requests[1]  # the automatic resume re-sent the round as is
    assert 0 < r.pttl(_slot("twice")) <= 600_000
    _wait_log(worker, ref.task_id, "succeeded in")
    assert len(_log_lines(worker, ref.task_id, "Retry in")) == 1

    cli = subprocess.run([sys.executable, "-m", "tasks.cli", "retry", "twice", "--wait", "--json", "--timeout", "30"],
                         cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    result = json.loads(cli.stdout)
    assert result["turn_id"] == ref.turn_id
    assert (result["status"], result["reply"], result["resumed"]) == ("completed", "A is 1", True), result
    usage = result["usage"]
    assert (usage["attempts"], usage["discarded_attempts"]) == (4, 2)  # the retry adds to the turn's usage
    assert counting_tools.calls(r, "lookup") == 1
    assert _tool_blocks(stack.fake_api.requests[3]["messages"]) == _tool_blocks(stack.fake_api.requests[1]["messages"])
    assert not r.exists(_slot("twice"))
    assert len(_turn_events(client, "twice", ref.turn_id, "turn.resumed")) == 2  # the auto resume and the retry


def test_an_expired_round_is_not_used_and_retry_reruns_the_tool(stack):
    """Past BATON_ROUND_TTL the slot is gone: `retry` behaves like a plain retry and runs the tool again."""
    stack.fake_api.set_handler(
        Script(
            [
                tool_call("lookup", {"key": "a"}),
                OVERLOADED,
                OVERLOADED,
                tool_call("lookup", {"key": "a"}),
                text("A is 1"),
            ]
        )
    )
    # 3 s, not less: the automatic resume must still find the round, even on a loaded machine.
    stack.worker(BATON_RETRY_BUDGET="1", BATON_ROUND_TTL="3")
    r = _redis(stack)

    client = stack.client(BATON_ROUND_TTL="3")
    ref, result = _fail_after_auto_resume(client, "stale", "what is a?")
    assert _turn_events(client, "stale", ref.turn_id, "turn.failed")[0]["resumable_round"] is True
    assert counting_tools.calls(r, "lookup") == 1
    assert r.pttl(_slot("stale")) <= 3000
    wait_until(lambda: not r.exists(_slot("stale")), 10, what="the stored round to expire")

    again = client.retry("stale")
    assert again.turn_id == ref.turn_id
    result = client.wait(again, timeout=30)
    assert result.status == "completed" and result.reply == "A is 1", result
    assert result.resumed is False
    assert counting_tools.calls(r, "lookup") == 2
    completed = _turn_events(client, "stale", ref.turn_id, "turn.completed")
    assert len(completed) == 1 and completed[0]["resumed"] is False
    # Only the automatic resume (before expiry) resumed; the retry did not.
    assert len(_turn_events(client, "stale", ref.turn_id, "turn.resumed")) == 1
    assert _transcript_notices(client, "stale", NOTICE) == 1


def test_resending_the_same_text_with_other_whitespace_retries_and_resumes(stack):
    """Re-sending the failed turn's text (whitespace aside) is a retry of that turn: same turn id, resumed."""
    stack.fake_api.set_handler(Script([tool_call("lookup", {"key": "a"}), OVERLOADED, OVERLOADED, text("A is 1")]))
    stack.worker(BATON_RETRY_BUDGET="1")
    r = _redis(stack)

    client = stack.client()
    ref, _ = _fail_after_auto_resume(client, "resend", "what is a?")
    again = client.send_message("resend", "  what   is\n\ta?  ")
    assert again.turn_id == ref.turn_id
    result = client.wait(again, timeout=30)
    assert result.status == "completed" and result.reply == "A is 1" and result.resumed is True, result
    assert counting_tools.calls(r, "lookup") == 1
    assert r.llen(keys.turns(keys.owner("chat", "resend"))) == 1  # no new turn was created


def test_a_different_message_discards_the_stored_round(stack):
    """A new, different message deletes the slot; the new turn does not resume and runs its tool afresh."""
    stack.fake_api.set_handler(
        Script(
            [
                tool_call("lookup", {"key": "a"}),
                OVERLOADED,
                OVERLOADED,
                tool_call("lookup", {"key": "a"}),
                text("fresh answer"),
            ]
        )
    )
    stack.worker(BATON_RETRY_BUDGET="1")
    r = _redis(stack)

    client = stack.client()
    ref, _ = _fail_after_auto_resume(client, "moved-on", "what is a?")
    assert r.exists(_slot("moved-on"))
    other = client.send_message("moved-on", "something else entirely")
    assert other.turn_id != ref.turn_id
    assert not r.exists(_slot("moved-on"))
    result = client.wait(other, timeout=30)
    assert result.status == "completed" and result.reply == "fresh answer" and result.resumed is False, result
    assert counting_tools.calls(r, "lookup") == 2
    assert _turn_events(client, "moved-on", other.turn_id, "turn.resumed") == []
    assert _turn_events(client, "moved-on", other.turn_id, "turn.retry") == []
    assert client.turn("moved-on", ref.turn_id).status == "failed"
    uses, _ = _tool_blocks(stack.fake_api.requests[3]["messages"])
    assert uses == []  # the new turn's first request carries none of the old round's blocks
    assert not r.exists(_slot("moved-on"))


def test_a_round_over_the_byte_ceiling_is_not_stored_and_not_auto_resumed(stack):
    """A round above BATON_ROUND_MAX_BYTES is not stored: the turn fails after one execution with
    `resumable_round: false`, and `retry` runs the tool again."""
    key = "k" * 2000  # the lookup result echoes the key, so the round is well over 1024 bytes
    stack.fake_api.set_handler(
        Script([tool_call("lookup", {"key": key}), OVERLOADED, tool_call("lookup", {"key": key}), text("done")])
    )
    worker = stack.worker(BATON_RETRY_BUDGET="1", BATON_ROUND_MAX_BYTES="1024")
    client = stack.client(BATON_ROUND_MAX_BYTES="1024")
    r = _redis(stack)

    ref = client.send_message("big", "look the long key up")
    result = client.wait(ref, timeout=30)
    assert result.status == "failed" and result.failure is not None and result.failure["retryable"] is True
    failed = _turn_events(client, "big", ref.turn_id, "turn.failed")
    assert len(failed) == 1 and failed[0]["resumable_round"] is False
    assert not r.exists(_slot("big"))
    assert _turn_events(client, "big", ref.turn_id, "turn.retry") == []
    assert stack.fake_api.request_count == 2
    _wait_log(worker, ref.task_id, "succeeded in")
    assert _log_lines(worker, ref.task_id, "Retry in") == []
    assert len(_log_lines(worker, ref.task_id, "] received")) == 1

    again = client.retry("big")
    result = client.wait(again, timeout=30)
    assert result.status == "completed" and result.reply == "done" and result.resumed is False, result
    assert counting_tools.calls(r, "lookup") == 2
    assert _turn_events(client, "big", ref.turn_id, "turn.resumed") == []
    assert re.search(r"value-of-k{2000} \(call 2\)", str(stack.fake_api.requests[3]["messages"]))
