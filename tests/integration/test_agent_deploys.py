"""A rolling deploy that changes agents under units in flight (issue 36), through real workers: a worker on the
old agents (tests/support/agents_v1.py) drains while a worker on the new ones (agents_v2.py) takes over.

One stack for every case (each worker start is seconds of the suite's budget): two coding runs drained off the v1
worker mid-stream and resumed on the v2 worker, one of a pinned agent (it keeps v1's instructions and tool list;
its call to the tool v2 dropped, whose code the v2 worker lacks, is answered as no longer available), one of an
agent with `upgrade=True` (it moves to v2 and says so); a chat turn for the agent v2 adds, while a v1 worker that
does not serve it is still on the queue; a turn for the agent v2 removed, sent after the last v1 worker left,
which waits (`agent_unavailable`) and then fails `agent_unknown`. Every write tool runs once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from agent.agents.pinning import UPGRADED_NOTICE
from agent.tools.definition import NO_LONGER_AVAILABLE
from tests.conftest import Stack
from tests.support import agents_v1, agents_v2, counting_tools
from tests.support.fake_anthropic import ByConversation, Fault, failing, text, tool_call
from tests.support.processes import wait_until
from tests.support.published import wait_for_agents

pytestmark = pytest.mark.integration

# The v2 workers give up on an agent they do not serve after 3 s; the v1 worker keeps the default (600 s), so a
# unit of the new agent handed back by it is never failed there.
V1 = {"BATON_AGENTS": "tests.support.agents_v1:AGENTS"}
V2 = {"BATON_AGENTS": "tests.support.agents_v2:AGENTS", "BATON_AGENT_WAIT": "3"}
# The web app's own setting: it lists an agent for a minute after the last worker serving it was seen, so a turn
# for `retired` is still accepted just after the last v1 worker left (a deploy the app has not heard of yet).
CLIENT = {"BATON_AGENT_WAIT": "60"}
# A stream the drain cuts: the run is mid-step on the v1 worker when it gets SIGTERM.
STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking about it for a long time"))
LOOKUP_GONE = NO_LONGER_AVAILABLE.format(name="lookup")


def system_text(request: dict[str, Any]) -> str:
    system = request.get("system")
    if isinstance(system, list):
        return "".join(b.get("text", "") for b in system)
    return system or ""


def which(request: dict[str, Any], v1: str, v2: str) -> str:
    """Whose instructions a request's system prompt carries: "v1", "v2", or what it is when neither (or both)."""
    system = system_text(request)
    found = [name for name, words in (("v1", v1), ("v2", v2)) if words in system]
    return found[0] if len(found) == 1 else f"neither or both: {system!r}"


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["name"] for t in request.get("tools") or []]


def requests_of(fake, first_text: str) -> list[dict[str, Any]]:
    """The requests of one conversation (by its first user message)."""
    out = []
    for r in list(fake.requests):
        first = r["messages"][0]["content"]
        body = first if isinstance(first, str) else "".join(b.get("text", "") for b in first if isinstance(b, dict))
        if first_text in body:
            out.append(r)
    return out


def last_results(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tool_result blocks of a request's last (user) message, by tool_use_id."""
    last = request["messages"][-1]
    assert last["role"] == "user"
    return {b["tool_use_id"]: b for b in last["content"] if b["type"] == "tool_result"}


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content)


def run_script(name: str) -> list:
    """A run's model replies: a write on v1, a step the drain cuts, then (on v2) a call to the dropped `lookup`, a
    second write, the answer."""
    return [
        tool_call("record_note", {"note": f"{name}-before"}),
        STALL,
        tool_call("lookup", {"key": name}, id=f"toolu_{name}_lookup"),
        tool_call("record_note", {"note": f"{name}-after"}),
        text(f"{name} done"),
    ]


def test_a_rolling_deploy_pins_or_upgrades_runs_in_flight_and_waits_for_agents_it_adds_or_removes(
    stack: Stack, tmp_path: Path
):
    fake = stack.fake_api
    fake.set_handler(
        ByConversation(
            {
                "pinned goal": run_script("pinned"),
                "upgraded goal": run_script("upgraded"),
                "for the new agent": [text("The new agent answers.")],
                "for the removed agent": [text("Nobody should ask this.")],
            }
        )
    )
    worker_a = stack.worker("a", concurrency=3, **V1)  # a free pool process beside the two runs
    client = stack.client(**CLIENT)
    v1 = wait_for_agents(client, "coder", "upcoder", "retired")
    (tmp_path / "ws-pinned").mkdir()
    (tmp_path / "ws-upgraded").mkdir()
    pinned = client.start_run("pinned goal", workspace=tmp_path / "ws-pinned", agent="coder")
    upgraded = client.start_run("upgraded goal", workspace=tmp_path / "ws-upgraded", agent="upcoder")
    wait_until(
        lambda: len(requests_of(fake, "pinned goal")) >= 2 and len(requests_of(fake, "upgraded goal")) >= 2,
        30,
        what="both runs to be mid-stream on their second step on the v1 worker",
    )

    worker_b = stack.worker("b", **V2)
    # Its own versions, as the listing names them for its hostname: the listing's summary of an agent is the newest
    # any worker published, and the v1 worker republishes `coder` every sweep (it was the newest now and then).
    v2 = {
        name: {"version": w["version"]}
        for name, agent in wait_for_agents(client, "extra").items()
        for w in agent["workers"]
        if w["hostname"] == worker_b.hostname
    }
    # A turn for the agent v2 adds, while the v1 worker (a free pool process, not serving it) still consumes the
    # queue: whichever takes it, it completes on the v2 worker.
    added = client.send_message("chat-new", "for the new agent", agent="extra")
    added_done = client.wait(added, timeout=60)

    worker_a.terminate()
    assert worker_a.wait_exit(timeout=15) == 0
    # The agent v2 removed, asked for after the last v1 worker left: the v2 worker hands the turn back until its
    # BATON_AGENT_WAIT (3 s) is over, then fails it.
    removed = client.send_message("chat-gone", "for the removed agent", agent="retired")
    waiting: list[Any] = []
    wait_until(
        lambda: (
            waiting.append(client.turn(removed.chat_id, removed.turn_id))
            or waiting[-1].waiting_reason == "agent_unavailable"
        ),
        20,
        what="the removed agent's turn to wait",
    )
    removed_done = client.wait(removed, timeout=30)
    pinned_done = client.wait(pinned, timeout=60)
    upgraded_done = client.wait(upgraded, timeout=60)
    r = redis.Redis.from_url(stack.redis_server.url)
    handed_back = f"[{added.task_id}] received" in worker_a.log()
    print(f"turn for the new agent first landed on the v1 worker and was handed back: {handed_back}")

    # 1. Pinned: the resumed run still sends v1's system prompt and v1's tool definitions, byte for byte; its call
    # to `lookup` (which v2 dropped and whose code the v2 worker lacks) is answered as no longer available.
    old_coder, new_coder = v1["coder"]["version"], v2["coder"]["version"]
    assert old_coder != new_coder
    assert (pinned_done.status, pinned_done.reply, pinned_done.interruptions) == ("completed", "pinned done", 1)
    requests = requests_of(fake, "pinned goal")
    assert len(requests) == 5
    instructions = [which(q, agents_v1.CODER_V1, agents_v2.CODER_V2) for q in requests]
    assert instructions == ["v1"] * 5, f"the pinned run's requests carried these instructions: {instructions}"
    assert {"record_note", "lookup"} <= set(tool_names(requests[0]))
    assert [q["tools"] == requests[0]["tools"] for q in requests] == [True] * 5, [tool_names(q) for q in requests]
    assert requests[2]["messages"] == requests[1]["messages"]  # the cut step, asked again on v2
    gone = last_results(requests[3])["toolu_pinned_lookup"]
    assert (result_text(gone), gone.get("is_error")) == (LOOKUP_GONE, True)
    assert (pinned_done.agent, pinned_done.agent_version) == ("coder", old_coder)
    assert [e for e in client.events(pinned.run_id) if e.type == "agent.changed"] == []

    # 2. Upgraded: after the resume the run sends v2's system prompt and tools, says so (`agent.changed` and the
    # notice), and its call to the dropped `lookup` is answered as no longer available.
    old_up, new_up = v1["upcoder"]["version"], v2["upcoder"]["version"]
    assert old_up != new_up
    assert (upgraded_done.status, upgraded_done.reply) == ("completed", "upgraded done"), upgraded_done
    assert (upgraded_done.agent, upgraded_done.agent_version) == ("upcoder", new_up)
    requests = requests_of(fake, "upgraded goal")
    assert len(requests) == 5
    instructions = [which(q, agents_v1.UPCODER_V1, agents_v2.UPCODER_V2) for q in requests]
    assert instructions == ["v1", "v1", "v2", "v2", "v2"], instructions
    assert ["lookup" in tool_names(q) for q in requests] == [True, True, False, False, False]
    gone = last_results(requests[3])["toolu_upgraded_lookup"]
    assert (result_text(gone), gone.get("is_error")) == (LOOKUP_GONE, True)
    changed = [e.model_extra for e in client.events(upgraded.run_id) if e.type == "agent.changed"]
    assert [(c["from"], c["to"]) for c in changed] == [(old_up, new_up)]
    notices = [m.text for m in client.transcript(upgraded.run_id) if m.role == "notice"]
    assert UPGRADED_NOTICE.format(before=old_up, after=new_up) in notices, notices

    # Every write ran exactly once, across both workers; `lookup` never ran (v1 was not asked, v2 lacks it).
    log = sorted(x.decode() for x in r.lrange(counting_tools.CALLS_KEY, 0, -1))
    assert log == [
        "record_note:pinned-after",
        "record_note:pinned-before",
        "record_note:upgraded-after",
        "record_note:upgraded-before",
    ]
    assert counting_tools.calls(r, "lookup") == 0
    assert fake.rejections == []

    # 3. The agent v2 added: served by the v2 worker, though a v1 worker was on the queue.
    assert (added_done.status, added_done.reply) == ("completed", "The new agent answers."), added_done
    assert (added_done.agent, added_done.agent_version) == ("extra", v2["extra"]["version"])
    assert "turn.completed" in [e.type for e in client.events("chat-new")]
    assert f"[{added.task_id}] succeeded" in worker_b.log()

    # 4. The agent v2 removed: waited as `agent_unavailable`, then failed `agent_unknown` (retryable), never asked.
    assert removed_done.status == "failed", removed_done
    assert removed_done.failure is not None
    assert (removed_done.failure["class"], removed_done.failure["retryable"]) == ("agent_unknown", True)
    assert removed_done.waiting_reason is None
    assert requests_of(fake, "for the removed agent") == []
    assert "no worker serves agent 'retired'; it waited 3 s" in removed_done.failure["message"]
    assert [w.status for w in waiting][-1] == "waiting"
