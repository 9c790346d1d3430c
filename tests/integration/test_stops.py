"""Issue 7, clean stops, end to end: real redis-server, real celery workers, the real SDK against the fake API.

A stop is cooperative and prompt: the watcher sees the stop key within a poll, the loop closes the round
(every announced tool call gets the interrupted placeholder), the unit settles `stopped` with one terminal
event and the `Stopped by user.` notice, and the chat's next turn still satisfies the API's tool pairing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import redis

from agent.messages import INTERRUPTED_RESULT, STOPPED_NOTICE
from tasks.store import keys
from tests.support import counting_tools
from tests.support.fake_anthropic import Fault, Script, failing, text, tool_call
from tests.support.processes import POOLS as PROCESS_POOLS
from tests.support.processes import REPO

pytestmark = pytest.mark.integration

# Watcher poll (0.5 s) + stop grace (1 s) + settling and the client's wake-up; generous for a loaded CI box.
PROMPT_STOP_S = 4.0
# The pools a stop must work on: prefork (a process per unit) and threads (every unit in one process, one poller).
POOLS = pytest.mark.parametrize("pool", PROCESS_POOLS)
# The same, plus the OpenAI edge once on threads (its fake refuses a `tool_calls` entry without its `tool` message).
POOLS_AND_OPENAI = pytest.mark.parametrize(
    ("pool", "provider"),
    [*(pytest.param(*p.values, "anthropic", marks=p.marks) if hasattr(p, "values") else (p, "anthropic")
       for p in PROCESS_POOLS), ("threads", "openai")],
)


def _worker(stack, name: str = "w1", *, pool: str | None = None, **env: str):
    """A worker whose `blocking_write` really blocks until released (up to its own 60 s).

    redis-py 8 defaults `socket_timeout` to 5 s, which would end the tool's 60 s BLPOP after 5 s with a
    TimeoutError (an error result the turn carries on with); the harness's counter URL override lifts it.
    """
    return stack.worker(name, pool=pool, BATON_TEST_COUNTER_URL=f"{stack.redis_server.url}?socket_timeout=90", **env)


def _redis(stack) -> redis.Redis:
    return redis.Redis.from_url(stack.redis_server.url, socket_timeout=60)  # our BLPOP waits up to 30 s


def _wait_tool_started(r: redis.Redis) -> None:
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None, "blocking_write never started"


def _types(events, prefix: str = "") -> list[str]:
    return [e.type for e in events if e.type.startswith(prefix)]


def _blocks(message: dict) -> list[dict]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _assert_paired_placeholder(request: dict, tool_use_id: str) -> None:
    """The request carries `tool_use_id`'s call and, in the very next message, its placeholder result."""
    messages = request["messages"]
    at = next(
        i
        for i, m in enumerate(messages)
        if m["role"] == "assistant" and any(b.get("id") == tool_use_id for b in _blocks(m))
    )
    answer = messages[at + 1]
    assert answer["role"] == "user"
    results = [b for b in _blocks(answer) if b.get("type") == "tool_result" and b["tool_use_id"] == tool_use_id]
    assert len(results) == 1, answer
    assert results[0]["content"] == INTERRUPTED_RESULT
    assert not results[0].get("is_error", False)


def _cli(stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tasks.cli", *args],
        cwd=REPO,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@POOLS_AND_OPENAI
def test_stop_mid_tool_settles_stopped_promptly_and_the_next_turn_pairs(stack, pool, provider):
    """A turn stopped while its write tool blocks ends `stopped` within about poll + grace: one `turn.stopped`,
    no `turn.failed`; the transcript closes the call with the non-error placeholder, then `Stopped by user.`;
    the chat's next turn is accepted by a server enforcing tool_use/tool_result pairing and carries that
    placeholder paired with its call. The tool is never released, so only the stop can end the turn."""
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "n1"}), text("second done")]))
    _worker(stack, pool=pool)
    client = stack.client()
    r = _redis(stack)
    try:
        ref = client.send_message("s1", "first")
        _wait_tool_started(r)
        asked = time.monotonic()
        assert client.stop("s1")["stopped"] is True
        result = client.wait(ref, timeout=30)
        latency = time.monotonic() - asked
        print(f"stop latency (mid-tool): {latency:.2f}s")
        assert result.status == "stopped", result
        assert result.failure is None
        assert latency < PROMPT_STOP_S, f"stop took {latency:.2f}s"

        events = client.events("s1")
        assert _types(events, "turn.").count("turn.stopped") == 1
        assert "turn.failed" not in _types(events)
        assert [e.type for e in events][-1] == "turn.stopped"

        transcript = client.transcript("s1")
        assert [m.role for m in transcript] == ["user", "assistant", "user", "notice"]
        (call,) = transcript[1].tool_uses
        assert call.name == "blocking_write"
        (placeholder,) = transcript[2].tool_results
        assert placeholder.tool_use_id == call.id
        assert placeholder.content == INTERRUPTED_RESULT and placeholder.is_error is False
        assert transcript[3].text == STOPPED_NOTICE

        nxt = client.wait(client.send_message("s1", "and now?"), timeout=30)
        assert nxt.status == "completed" and nxt.reply == "second done"
        assert stack.fake_api.rejections == []
        assert stack.fake_api.request_count == 2
        _assert_paired_placeholder(stack.fake_api.requests[1], call.id)
        assert counting_tools.calls(r, "blocking_write") == 1
    finally:
        r.rpush(counting_tools.RELEASE_KEY, "go")  # free the abandoned tool thread


def test_cli_stop_prints_one_json_object_and_a_finished_chat_is_left_alone(stack):
    """`baton stop CHAT --json` prints one JSON object with `id` and `stopped`: true for a running turn (which
    then ends `stopped`), false for the now finished chat, whose status, events and transcript stay as they
    were; no stop lingers, so the chat's next turn completes."""
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "cli"}), text("later done")]))
    _worker(stack)
    client = stack.client()
    r = _redis(stack)
    try:
        ref = client.send_message("s2", "block please")
        _wait_tool_started(r)
        out = _cli(stack, "stop", "s2", "--json")
        assert out.returncode == 0, out.stderr
        lines = out.stdout.strip().splitlines()
        assert len(lines) == 1, out.stdout
        first = json.loads(lines[0])
        assert first["id"] == "s2" and first["stopped"] is True
        assert client.wait(ref, timeout=30).status == "stopped"

        before = (client.turn("s2", ref.turn_id), client.events("s2"), client.transcript("s2"))
        out = _cli(stack, "stop", "s2", "--json")
        assert out.returncode == 0, out.stderr
        lines = out.stdout.strip().splitlines()
        assert len(lines) == 1, out.stdout
        again = json.loads(lines[0])
        assert again["id"] == "s2" and again["stopped"] is False
        time.sleep(1.0)  # a watcher poll and more: anything a stray stop could have done, it would have done
        after = (client.turn("s2", ref.turn_id), client.events("s2"), client.transcript("s2"))
        assert after == before
        assert r.exists(keys.stop(keys.owner("chat", "s2"))) == 0

        nxt = client.wait(client.send_message("s2", "go on"), timeout=30)
        assert nxt.status == "completed" and nxt.reply == "later done"
        assert stack.fake_api.rejections == []
    finally:
        r.rpush(counting_tools.RELEASE_KEY, "go")


@POOLS_AND_OPENAI
def test_stop_during_a_stalled_stream_ends_promptly_without_partial_text(stack, pool, provider):
    """A stream that sent a text fragment and then went silent is closed by a stop: the turn ends `stopped`
    long before the stall (30 s) or the idle timeout (20 s) would end it, is not replayed, and none of the
    partial text reaches the transcript."""
    stack.fake_api.set_handler(
        Script([failing(Fault(kind="stall", seconds=30, after_events=4), like=text("partial..."))])
    )
    _worker(stack, pool=pool)
    client = stack.client()
    ref = client.send_message("s3", "talk slowly")
    assert stack.fake_api.wait_for_requests(1, timeout=30)
    time.sleep(0.5)  # the fragment ("part") is on the wire; the stream is now silent
    asked = time.monotonic()
    assert client.stop("s3")["stopped"] is True
    result = client.wait(ref, timeout=30)
    latency = time.monotonic() - asked
    print(f"stop latency (stalled stream): {latency:.2f}s")
    assert result.status == "stopped", result
    assert latency < PROMPT_STOP_S, f"stop took {latency:.2f}s"

    transcript = client.transcript("s3")
    assert [m.role for m in transcript] == ["user", "notice"]
    assert transcript[1].text == STOPPED_NOTICE
    assert not any("part" in m.text for m in transcript)
    types = _types(client.events("s3"))
    assert types.count("turn.stopped") == 1
    assert "turn.failed" not in types and "turn.retry" not in types
    assert stack.fake_api.request_count == 1


@POOLS_AND_OPENAI
def test_worker_killed_mid_tool_is_recovered_by_the_sweep_without_rerunning_the_write(stack, pool, provider):
    """A worker SIGKILLed (whole process group) inside a write tool leaves a `committing` ledger entry; once
    its lease (3 s) expires, a second worker's sweep requeues the turn, which replays without re-running the
    write (its result becomes the placeholder) and completes; the chat's next turn pairs cleanly."""
    stack.fake_api.set_handler(
        Script([tool_call("blocking_write", {"note": "once"}), text("recovered"), text("next done")])
    )
    w1 = _worker(stack, "w1", pool=pool, BATON_LEASE_TTL="3")
    client = stack.client()
    r = _redis(stack)
    try:
        ref = client.send_message("s4", "write once")
        _wait_tool_started(r)
        w1.kill9()
        killed = time.monotonic()
        _worker(stack, "w2", BATON_LEASE_TTL="3")
        result = client.wait(ref, timeout=30)
        print(f"recovered {time.monotonic() - killed:.2f}s after the kill")
        assert result.status == "completed", result
        assert result.reply == "recovered"
        assert counting_tools.calls(r, "blocking_write") == 1

        events = client.events("s4")
        lost = [e for e in events if e.type == "turn.retry"]
        assert len(lost) == 1 and lost[0].model_extra["cause"] == "worker_lost"
        assert _types(events).count("turn.completed") == 1 and "turn.failed" not in _types(events)
        interrupted = [e for e in events if e.type == "tool.result"]
        assert [e.model_extra["status"] for e in interrupted] == ["interrupted"]

        (call_id,) = [b.id for m in client.transcript("s4") for b in m.tool_uses]
        _assert_paired_placeholder(stack.fake_api.requests[1], call_id)

        nxt = client.wait(client.send_message("s4", "and next?"), timeout=30)
        assert nxt.status == "completed" and nxt.reply == "next done"
        assert stack.fake_api.rejections == []
        assert stack.fake_api.request_count == 3
        _assert_paired_placeholder(stack.fake_api.requests[2], call_id)
    finally:
        r.rpush(counting_tools.RELEASE_KEY, "go")


def test_stop_a_coding_run_mid_tool(stack, tmp_path):
    """A coding run stopped while its first tool (a blocking write) runs ends `stopped` with exactly one
    `run.stopped` event and no `run.failed`; its transcript closes the call with the placeholder."""
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "run"}), text("unreachable")]))
    _worker(stack)
    client = stack.client()
    r = _redis(stack)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    try:
        ref = client.start_run("write a note", workspace=workspace)
        _wait_tool_started(r)
        asked = time.monotonic()
        assert client.stop(ref.run_id)["stopped"] is True
        client.wait(ref, timeout=30)
        latency = time.monotonic() - asked
        print(f"stop latency (coding run): {latency:.2f}s")
        status = client.run_status(ref.run_id)
        assert status.status == "stopped", status
        assert status.failure is None
        assert latency < PROMPT_STOP_S, f"stop took {latency:.2f}s"

        types = _types(client.events(ref.run_id))
        assert types.count("run.stopped") == 1 and "run.failed" not in types
        transcript = client.transcript(ref.run_id)
        results = [b for m in transcript for b in m.tool_results]
        assert [(b.content, b.is_error) for b in results] == [(INTERRUPTED_RESULT, False)]
        assert transcript[-1].text == STOPPED_NOTICE
        assert stack.fake_api.request_count == 1
    finally:
        r.rpush(counting_tools.RELEASE_KEY, "go")
