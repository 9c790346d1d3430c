"""Coding runs end to end: the workspace tools, the step journal, single flight, crash replay and retry.

Real redis-server, real celery workers, the real SDK against the fake Messages API. SIGTERM drain and the
plain SIGKILL-mid-stream recovery live in test_drain.py; these tests cover what a run adds on top.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from agent.messages import INTERRUPTED_RESULT
from tasks.client import ValidationError
from tasks.store import keys
from tests.support import counting_tools
from tests.support.fake_anthropic import Fault, Script, failing, text, tool_call
from tests.support.processes import REPO, wait_until

pytestmark = pytest.mark.integration

RUN_FIELDS = {"run_id", "status", "interruptions", "waiting_reason", "steps", "reply", "failure", "usage", "agent",
              "agent_version", "model"}
REJECTED = failing(Fault(kind="http", status=400, message="fake_anthropic: this request is refused"))


def _cli(stack, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tasks.cli", *args],
        cwd=REPO,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _redis(stack) -> redis.Redis:
    return redis.Redis.from_url(stack.redis_server.url)


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def _last_results(body: dict) -> dict[str, dict]:
    """The tool_result blocks of a request's last (user) message, by tool_use_id."""
    last = body["messages"][-1]
    assert last["role"] == "user"
    return {b["tool_use_id"]: b for b in last["content"] if b["type"] == "tool_result"}


def _steps(events) -> list[str]:
    return [e.model_extra["step"] for e in events if e.type == "run.step" and "step" in e.model_extra]


def _canonical(body: dict) -> str:
    return json.dumps(body, sort_keys=True)


def test_cli_run_writes_reads_lists_and_runs_a_command_in_its_workspace(stack, tmp_path):
    """`baton run --workspace --wait --json`: the model writes src/app.py, reads it back, lists the workspace and
    runs it; the file holds what the model wrote, each tool result (the command's output included) is fed back
    to the next request, `baton status` agrees, and the events tell the run's story in order."""
    ws = _workspace(tmp_path)
    source = "print(6*7)\n"
    stack.fake_api.set_handler(
        Script(
            [
                tool_call("write_file", {"path": "src/app.py", "content": source}, id="toolu_write"),
                tool_call("read_file", {"path": "src/app.py"}, id="toolu_read"),
                tool_call("list_files", {}, id="toolu_list"),
                tool_call("run_command", {"command": "python3 src/app.py"}, id="toolu_run"),
                text("src/app.py prints 42."),
            ]
        )
    )
    stack.worker()
    goal = "write an app that prints 42"
    out = _cli(stack, "run", goal, "--workspace", str(ws), "--run-id", "app-42", "--wait", "--json", "--timeout", "60")
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert set(result) == RUN_FIELDS and result["run_id"] == "app-42"
    assert result["status"] == "completed" and result["reply"] == "src/app.py prints 42."
    assert result["failure"] is None and result["interruptions"] == 0 and result["waiting_reason"] is None
    assert result["steps"] == 9  # five model steps and four tool steps

    assert (ws / "src" / "app.py").read_text() == source
    requests = stack.fake_api.requests
    assert len(requests) == 5
    assert {"read_file", "write_file", "list_files", "run_command", "record_note", "lookup"} <= {
        t["name"] for t in requests[0]["tools"]
    }
    assert "wrote 11 bytes to src/app.py" in _last_results(requests[1])["toolu_write"]["content"]
    assert _last_results(requests[2])["toolu_read"]["content"] == source
    assert _last_results(requests[3])["toolu_list"]["content"].splitlines() == ["src/", "src/app.py"]
    ran = _last_results(requests[4])["toolu_run"]
    assert not ran.get("is_error") and "exit code 0" in ran["content"] and "42" in ran["content"]

    status = _cli(stack, "status", result["run_id"], "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == result

    events = stack.client().events(result["run_id"])
    types = [e.type for e in events]
    assert types[0] == "run.started" and types[-1] == "run.completed" and types.count("run.completed") == 1
    steps = _steps(events)
    assert steps == [
        "model:0",
        "tool:toolu_write",
        "model:1",
        "tool:toolu_read",
        "model:2",
        "tool:toolu_list",
        "model:3",
        "tool:toolu_run",
        "model:4",
    ]
    assert all(e.run_id == result["run_id"] for e in events)


def test_a_second_delivery_of_a_live_run_is_dropped(stack, tmp_path):
    """The same run published again while it is inside a write tool: the duplicate finds the run's lease held
    and is dropped; the tool runs once, the provider sees the scripted two requests, one run.completed."""
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "once"}), text("done once")]))
    worker = stack.worker()
    client = stack.client()
    r = _redis(stack)
    ref = client.start_run("do it once", workspace=_workspace(tmp_path))
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None  # the run is inside its tool
    dup = client._celery.send_task("baton.coding_run", args=[ref.run_id], queue=stack.queue)
    # The worker's second pool process takes the duplicate and drops it while the first still holds the run.
    wait_until(lambda: f"[{dup.id}] ignored" in worker.log(), 20, what="the duplicate to be dropped")
    assert stack.fake_api.request_count == 1 and client.run_status(ref.run_id).status == "running"
    r.rpush(counting_tools.RELEASE_KEY, "go")
    status = client.wait(ref, timeout=30)
    assert status.status == "completed" and status.reply == "done once" and status.steps == 3
    assert counting_tools.calls(r, "blocking_write") == 1
    assert stack.fake_api.request_count == 2
    types = [e.type for e in client.events(ref.run_id)]
    assert types.count("run.started") == 1 and types.count("run.completed") == 1
    # A late duplicate of the finished run is a no-op too.
    late = client._celery.send_task("baton.coding_run", args=[ref.run_id], queue=stack.queue)
    # The unit tasks store no Celery result (the record is the result): the worker's log says how it ended.
    wait_until(lambda: f"[{late.id}] succeeded in" in worker.log(), 30, what="the late duplicate to end")
    assert "'already finished'" in next(line for line in worker.log().splitlines() if f"[{late.id}] succeeded" in line)
    assert counting_tools.calls(r, "blocking_write") == 1 and stack.fake_api.request_count == 2
    assert not r.keys("celery-task-meta-*")  # nothing stored twice: the record holds the run's outcome


def test_sigkill_inside_a_write_tool_replays_the_journal_without_repeating_a_finished_step(stack, tmp_path):
    """SIGKILL the worker while a (non-idempotent) write tool is mid-effect: another worker recovers the run
    after the lease expires and replays its journal. Finished steps are not re-run (record_note once, no
    provider request repeated), the write caught by its write-ahead `committing` entry is not blindly repeated
    but answered with the interrupted placeholder, and each step appears once in the run's events."""
    env = {"BATON_LEASE_TTL": "3"}
    stack.fake_api.set_handler(
        Script(
            [
                tool_call("record_note", {"note": "first"}, id="toolu_note"),
                tool_call("blocking_write", {"note": "second"}, id="toolu_block"),
                text("recovered"),
            ]
        )
    )
    worker_a = stack.worker("a", **env)
    client = stack.client(**env)
    r = _redis(stack)
    ref = client.start_run("two writes and a crash", workspace=_workspace(tmp_path))
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None
    owner = keys.owner("run", ref.run_id)
    journal = {k.decode(): json.loads(v) for k, v in r.hgetall(keys.journal(owner, ref.run_id, 0)).items()}
    assert {k: v["status"] for k, v in journal.items()} == {
        "model:0": "done",
        "tool:toolu_note": "done",
        "model:1": "done",
        "tool:toolu_block": "committing",
    }
    stack.worker("b", **env)
    worker_a.kill9()

    status = client.wait(ref, timeout=60)
    assert status.status == "completed" and status.reply == "recovered"
    assert status.interruptions == 1 and status.waiting_reason is None and status.steps == 5
    assert counting_tools.calls(r, "record_note") == 1
    assert counting_tools.calls(r, "blocking_write") == 1
    requests = stack.fake_api.requests
    assert len(requests) == 3
    assert len({_canonical(b) for b in requests}) == 3, "a finished model step was requested again"
    fed_back = _last_results(requests[2])["toolu_block"]
    assert fed_back["content"] == INTERRUPTED_RESULT

    events = client.events(ref.run_id)
    assert _steps(events) == ["model:0", "tool:toolu_note", "model:1", "tool:toolu_block", "model:2"]
    replayed = [e for e in events if e.type == "run.step" and e.model_extra.get("step") == "tool:toolu_block"]
    assert replayed[0].model_extra["status"] == "interrupted"
    types = [e.type for e in events]
    assert types.count("tool.called") == 2 and types.count("run.completed") == 1
    assert types.index("run.interrupted") < types.index("run.resumed") < types.index("run.completed")
    lost = [e for e in events if e.type == "run.interrupted"]
    assert [e.model_extra["cause"] for e in lost] == ["worker_lost"]


def test_a_run_failed_at_the_provider_is_retried_from_its_stored_round(stack, tmp_path):
    """A non-retryable provider failure (HTTP 400) after a tool round fails the run with its class and stores
    the round; `Client.retry` within BATON_ROUND_TTL continues it: the write tool does not run again, the next
    request carries the earlier tool result (it is the failed request, re-sent), the slot is read and cleared."""
    env = {"BATON_RETRY_BUDGET": "1"}
    stack.fake_api.set_handler(
        Script([tool_call("record_note", {"note": "kept"}, id="toolu_kept"), REJECTED, text("finished on retry")])
    )
    stack.worker(**env)
    client = stack.client(**env)
    r = _redis(stack)
    ref = client.start_run("note then finish", workspace=_workspace(tmp_path))
    failed = client.wait(ref, timeout=60)
    assert failed.status == "failed" and failed.steps == 2
    assert failed.failure is not None
    assert failed.failure["class"] == "provider_bad_request" and failed.failure["retryable"] is False
    slot = keys.round_slot(keys.owner("run", ref.run_id))
    assert 0 < r.pttl(slot) <= 600_000
    run_failed = [e for e in client.events(ref.run_id) if e.type == "run.failed"]
    assert len(run_failed) == 1 and run_failed[0].model_extra["resumable_round"] is True
    assert stack.fake_api.request_count == 2  # no automatic resume for a bad request

    again = client.retry(ref.run_id)
    assert again.run_id == ref.run_id
    status = client.wait(again, timeout=60)
    assert status.status == "completed" and status.reply == "finished on retry" and status.failure is None
    assert status.steps == 3, "a run's step count must not go back when it continues"
    assert counting_tools.calls(r, "record_note") == 1
    requests = stack.fake_api.requests
    assert len(requests) == 3
    assert requests[2]["messages"] == requests[1]["messages"]
    assert "recorded 'kept'" in _last_results(requests[2])["toolu_kept"]["content"]
    assert not r.exists(slot)
    events = client.events(ref.run_id)
    resumed = [e for e in events if e.type == "run.resumed"]
    assert len(resumed) == 1 and resumed[0].model_extra["from"] == "stored_round"
    assert [e.type for e in events].count("run.completed") == 1
    assert _steps(events) == ["model:0", "tool:toolu_kept", "model:1"]


def test_two_retryable_failures_in_a_row_fail_the_run_as_retryable_and_retry_continues_it(stack, tmp_path):
    """A retryable failure (HTTP 500) after a tool round resumes the run once by itself; a second one in a row
    fails it as retryable with its round stored. `Client.retry` then continues: every request after the tool
    round is the same request (no finished step re-run), and the write tool ran once in all."""
    env = {"BATON_RETRY_BUDGET": "1"}
    server_error = failing(Fault(kind="http", status=500, message="fake_anthropic: internal error"))
    stack.fake_api.set_handler(
        Script(
            [
                tool_call("record_note", {"note": "kept"}, id="toolu_kept"),
                server_error,
                server_error,
                text("finished on retry"),
            ]
        )
    )
    stack.worker(**env)
    client = stack.client(**env)
    r = _redis(stack)
    ref = client.start_run("note then finish", workspace=_workspace(tmp_path))
    failed = client.wait(ref, timeout=60)
    assert failed.status == "failed" and failed.failure is not None
    assert failed.failure["class"] == "provider_server_error" and failed.failure["retryable"] is True
    assert stack.fake_api.request_count == 3  # the first failure resumed automatically, the second did not
    run_failed = [e for e in client.events(ref.run_id) if e.type == "run.failed"]
    assert len(run_failed) == 1 and run_failed[0].model_extra["resumable_round"] is True

    status = client.wait(client.retry(ref.run_id), timeout=60)
    assert status.status == "completed" and status.reply == "finished on retry" and status.steps == 3
    assert counting_tools.calls(r, "record_note") == 1
    requests = stack.fake_api.requests
    assert len(requests) == 4
    assert requests[1]["messages"] == requests[2]["messages"] == requests[3]["messages"]
    assert "recorded 'kept'" in _last_results(requests[3])["toolu_kept"]["content"]


def test_retry_after_the_round_expired_starts_the_run_over(stack, tmp_path):
    """Past BATON_ROUND_TTL the stored round is gone: `baton retry RUN_ID` re-runs the run from its goal, so the
    write tool runs again and the first request after the retry is the run's very first request."""
    env = {"BATON_RETRY_BUDGET": "1", "BATON_ROUND_TTL": "2"}
    stack.fake_api.set_handler(
        Script(
            [
                tool_call("record_note", {"note": "n"}, id="toolu_one"),
                REJECTED,
                tool_call("record_note", {"note": "n"}, id="toolu_two"),
                text("done from scratch"),
            ]
        )
    )
    stack.worker(**env)
    client = stack.client(**env)
    r = _redis(stack)
    ref = client.start_run("note then finish", workspace=_workspace(tmp_path))
    assert client.wait(ref, timeout=60).status == "failed"
    slot = keys.round_slot(keys.owner("run", ref.run_id))
    assert r.exists(slot)
    wait_until(lambda: not r.exists(slot), 10, what="the stored round to expire")

    out = _cli(stack, "retry", ref.run_id, "--wait", "--json", "--timeout", "60")
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert set(result) == RUN_FIELDS
    assert result["status"] == "completed" and result["reply"] == "done from scratch"
    assert counting_tools.calls(r, "record_note") == 2
    requests = stack.fake_api.requests
    assert len(requests) == 4
    assert requests[2]["messages"] == requests[0]["messages"]
    assert not [e for e in client.events(ref.run_id) if e.type == "run.resumed"]


def test_invalid_run_input_is_refused_before_anything_is_enqueued(scripted_stack, tmp_path):
    """An empty goal, a missing workspace, a file as workspace or a malformed run id raise ValidationError from
    `start_run` and exit 2 from `baton run`, and nothing reaches Redis: no record, no queued message."""
    stack = scripted_stack
    ws = _workspace(tmp_path)
    (ws / "file.txt").write_text("not a directory")
    client = stack.client()
    r = _redis(stack)
    bad_calls = [
        ("", ws, None),
        ("   ", ws, None),
        ("a goal", tmp_path / "missing", None),
        ("a goal", ws / "file.txt", None),
        ("a goal", ws, "not a valid id!"),
    ]
    for goal, workspace, run_id in bad_calls:
        with pytest.raises(ValidationError):
            client.start_run(goal, workspace=workspace, run_id=run_id)
    assert r.dbsize() == 0

    for args in (["", "--workspace", str(ws)], ["a goal", "--workspace", str(tmp_path / "missing")]):
        out = _cli(stack, "run", *args, "--json")
        assert out.returncode == 2, out.stdout + out.stderr
        assert "error" in json.loads(out.stdout)
    assert r.dbsize() == 0
