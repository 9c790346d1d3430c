"""Approvals with real workers and the real SDK: the unit parks holding no worker, and resumes anywhere.

`deploy` (tests/support/counting_tools.py) is a write tool with `approval=True`; its calls are counted in
Redis across processes, so "ran once" and "never ran" are facts, not hopes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis

from agent.messages import INTERRUPTED_RESULT
from tasks.client import NotFound
from tests.conftest import PROVIDERS
from tests.support import counting_tools
from tests.support.fake_anthropic import Script, text, tool_call
from tests.support.processes import REPO, wait_until

pytestmark = pytest.mark.integration

DEPLOY = tool_call("deploy", {"env": "prod"}, id="toolu_deploy")


def _redis(stack) -> redis.Redis:
    return redis.Redis.from_url(stack.redis_server.url)


def _types(client, ident: str) -> list[str]:
    return [e.type for e in client.events(ident)]


def _parked(client, ref):
    result = client.wait(ref, timeout=30)
    assert (result.status, result.waiting_reason) == ("waiting", "approval"), result
    return result


@pytest.mark.parametrize("provider", PROVIDERS)
def test_approved_runs_once_and_the_parked_turn_held_no_worker(stack, provider):
    """While the turn waits, a concurrency-1 worker serves another chat; after approval the tool runs once."""
    stack.fake_api.set_handler(Script([DEPLOY, text("other chat answered"), text("Deployed to prod.")]))
    stack.worker("solo", concurrency=1)
    client, r = stack.client(), _redis(stack)
    ref = client.send_message("ship", "deploy to prod")
    _parked(client, ref)
    requested = [e for e in client.events("ship") if e.type == "tool.approval_requested"]
    assert len(requested) == 1 and requested[0].model_extra["name"] == "deploy"
    assert requested[0].model_extra["tool_use_id"] == "toolu_deploy"
    assert requested[0].model_extra["input"] == {"env": "prod"}
    assert not r.exists("baton:{chat:ship}:lease")

    other = client.wait(client.send_message("other", "hello"), timeout=30)
    assert other.status == "completed" and other.reply == "other chat answered"

    assert client.approve("ship", "toolu_deploy", by="alice") == {
        "id": "ship", "tool_use_id": "toolu_deploy", "decision": "approved"
    }
    result = client.wait(ref, timeout=30)
    assert result.status == "completed" and result.reply == "Deployed to prod."
    assert counting_tools.calls(r, "deploy") == 1
    approved = [e for e in client.events("ship") if e.type == "tool.approved"]
    assert len(approved) == 1 and approved[0].model_extra["by"] == "alice"
    # Deciding again changes nothing and says what was decided.
    again = client.deny("ship", "toolu_deploy", reason="too late")
    assert again["decision"] == "approved" and again["already_decided"] is True
    assert _types(client, "ship").count("tool.denied") == 0
    with pytest.raises(NotFound):
        client.approve("ship", "toolu_nope")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_denied_with_a_reason_never_runs_and_the_model_reads_why(stack, provider):
    stack.fake_api.set_handler(Script([DEPLOY, text("Understood, I will not deploy.")]))
    stack.worker()
    client, r = stack.client(), _redis(stack)
    ref = client.send_message("nope", "deploy to prod")
    _parked(client, ref)
    assert client.deny("nope", "toolu_deploy", reason="not on a Friday")["decision"] == "denied"
    result = client.wait(ref, timeout=30)
    assert result.status == "completed" and result.reply == "Understood, I will not deploy."
    assert counting_tools.calls(r, "deploy") == 0
    (answer,) = [b for b in stack.fake_api.requests[1]["messages"][-1]["content"] if b["type"] == "tool_result"]
    denial = "Denied by user: not on a Friday"
    answer.pop("cache_control", None)  # the rolling prompt-cache mark on the last block (agent/history/caching.py)
    assert answer == {"type": "tool_result", "tool_use_id": "toolu_deploy", "content": denial, "is_error": True}


def test_an_undecided_call_expires_as_denied(stack):
    stack.fake_api.set_handler(Script([DEPLOY, text("The approval expired; nothing was deployed.")]))
    stack.worker(BATON_APPROVAL_TTL="1", BATON_LEASE_TTL="4")
    client, r = stack.client(), _redis(stack)
    ref = client.send_message("late", "deploy to prod")
    _parked(client, ref)
    wait_until(lambda: client.turn("late", ref.turn_id).status == "completed", 30, interval=0.2,
               what="the sweep to expire the approval and the turn to finish")
    result = client.turn("late", ref.turn_id)
    assert result.reply == "The approval expired; nothing was deployed."
    assert counting_tools.calls(r, "deploy") == 0
    (denied,) = [e for e in client.events("late") if e.type == "tool.denied"]
    assert denied.model_extra["reason"] == "approval expired"
    (answer,) = [b for b in stack.fake_api.requests[1]["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert answer["content"] == "Denied: approval expired." and answer["is_error"] is True


def test_approved_after_every_worker_was_replaced(stack):
    """Park, stop every worker, start a new one, approve: it completes on the new worker, the tool ran once."""
    stack.fake_api.set_handler(Script([DEPLOY, text("Deployed after the restart.")]))
    first = stack.worker("old")
    client, r = stack.client(), _redis(stack)
    ref = client.send_message("restart", "deploy to prod")
    _parked(client, ref)
    first.stop()
    stack.worker("new")
    client.approve("restart", "toolu_deploy")
    result = client.wait(ref, timeout=30)
    assert result.status == "completed" and result.reply == "Deployed after the restart."
    assert counting_tools.calls(r, "deploy") == 1
    assert stack.fake_api.request_count == 2  # the first answer was replayed from the journal, not asked again


def test_a_stop_while_waiting_stops_calmly_with_a_placeholder(stack):
    stack.fake_api.set_handler(Script([tool_call("deploy", {"env": "prod"}, text="Deploying now.", id="toolu_deploy")]))
    stack.worker()
    client, r = stack.client(), _redis(stack)
    ref = client.send_message("halt", "deploy to prod")
    _parked(client, ref)
    assert client.stop("halt")["stopped"] is True
    result = client.wait(ref, timeout=30)
    assert result.status == "stopped"
    assert counting_tools.calls(r, "deploy") == 0 and stack.fake_api.request_count == 1
    transcript = client.transcript("halt")
    results = [b for m in transcript for b in m.tool_results]
    assert [(b.tool_use_id, b.content) for b in results] == [("toolu_deploy", INTERRUPTED_RESULT)]
    assert any(m.role == "assistant" and m.text == "Deploying now." for m in transcript)
    types = _types(client, "halt")
    assert types.count("turn.stopped") == 1 and "turn.failed" not in types
    with pytest.raises(NotFound):
        client.approve("halt", "toolu_deploy")  # nothing waits any more


def test_a_coding_run_waits_for_approval_and_the_cli_decides(stack, tmp_path):
    stack.fake_api.set_handler(Script([DEPLOY, text("Run finished after the deploy.")]))
    stack.worker()
    client, r = stack.client(), _redis(stack)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ref = client.start_run("deploy the app", workspace=workspace)
    status = client.wait(ref, timeout=30)
    assert (status.status, status.waiting_reason) == ("waiting", "approval")
    # No --by: the OS user decides (getpass reads LOGNAME first), so the audit trail names them.
    out = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "approve", ref.run_id, "toolu_deploy", "--json"],
        cwd=REPO, env={**stack.env, "LOGNAME": "deploy-operator"}, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"id": ref.run_id, "tool_use_id": "toolu_deploy", "decision": "approved"}
    (approved,) = [e for e in client.events(ref.run_id) if e.type == "tool.approved"]
    assert approved.model_extra["by"] == "deploy-operator"
    status = client.wait(ref, timeout=30)
    assert status.status == "completed" and status.reply == "Run finished after the deploy."
    assert counting_tools.calls(r, "deploy") == 1


def test_an_approve_and_a_deny_racing_leave_exactly_one_decision(stack):
    """Both callers are told the same decision; one tool.approved or tool.denied event, never both."""
    import threading

    stack.fake_api.set_handler(Script([DEPLOY, text("Decided.")]))
    stack.worker()
    client, r = stack.client(), _redis(stack)
    ref = client.send_message("race", "deploy to prod")
    _parked(client, ref)
    others = [stack.client() for _ in range(2)]
    go = threading.Barrier(2)
    answers: list[dict] = []

    def approve() -> None:
        go.wait()
        answers.append(others[0].approve("race", "toolu_deploy", by="alice"))

    def deny() -> None:
        go.wait()
        answers.append(others[1].deny("race", "toolu_deploy", reason="no", by="bob"))

    threads = [threading.Thread(target=approve), threading.Thread(target=deny)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(answers) == 2 and answers[0]["decision"] == answers[1]["decision"]
    assert sum(1 for a in answers if a.get("already_decided")) == 1
    result = client.wait(ref, timeout=30)
    assert result.status == "completed"
    decided = [e for e in client.events("race") if e.type in ("tool.approved", "tool.denied")]
    assert len(decided) == 1 and decided[0].type == f"tool.{answers[0]['decision']}"
    assert counting_tools.calls(r, "deploy") == (1 if answers[0]["decision"] == "approved" else 0)


def test_a_run_parked_in_the_middle_of_ten_steps_redoes_no_step(stack, tmp_path):
    """Four notes, the deploy that waits, four notes, the answer: after approval every step ran exactly once
    and no model step was asked twice (the journal replays the first half)."""
    notes = [tool_call("record_note", {"note": f"n{i}"}, id=f"toolu_note{i}") for i in range(8)]
    script = [*notes[:4], DEPLOY, *notes[4:], text("Ten steps done.")]
    stack.fake_api.set_handler(Script(script))
    stack.worker()
    client, r = stack.client(), _redis(stack)
    workspace = tmp_path / "ten"
    workspace.mkdir()
    ref = client.start_run("ten steps with a deploy", workspace=workspace)
    status = client.wait(ref, timeout=60)
    assert (status.status, status.waiting_reason) == ("waiting", "approval")
    assert counting_tools.calls(r, "record_note") == 4 and stack.fake_api.request_count == 5
    client.approve(ref.run_id, "toolu_deploy")
    status = client.wait(ref, timeout=60)
    assert status.status == "completed" and status.reply == "Ten steps done."
    assert counting_tools.calls(r, "record_note") == 8 and counting_tools.calls(r, "deploy") == 1
    assert stack.fake_api.request_count == len(script)
